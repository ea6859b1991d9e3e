from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast






T = TypeVar("T", bound="Rule")



@_attrs_define
class Rule:
    """ 
        Attributes:
            collection (str):
            fields (list[str] | None): update's field list; null: any field.
            grants (list[str]):
            rows (None | str): The filter as written; null: every row.
     """

    collection: str
    fields: list[str] | None
    grants: list[str]
    rows: None | str
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        collection = self.collection

        fields: list[str] | None
        if isinstance(self.fields, list):
            fields = self.fields


        else:
            fields = self.fields

        grants = self.grants



        rows: None | str
        rows = self.rows


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "collection": collection,
            "fields": fields,
            "grants": grants,
            "rows": rows,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        collection = d.pop("collection")

        def _parse_fields(data: object) -> list[str] | None:
            if data is None:
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                fields_type_0 = cast(list[str], data)

                return fields_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[str] | None, data)

        fields = _parse_fields(d.pop("fields"))


        grants = cast(list[str], d.pop("grants"))


        def _parse_rows(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        rows = _parse_rows(d.pop("rows"))


        rule = cls(
            collection=collection,
            fields=fields,
            grants=grants,
            rows=rows,
        )


        rule.additional_properties = d
        return rule

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
