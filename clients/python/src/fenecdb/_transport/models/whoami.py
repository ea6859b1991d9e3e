from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.rule import Rule





T = TypeVar("T", bound="Whoami")



@_attrs_define
class Whoami:
    """ 
        Attributes:
            rules (list[Rule]):
            sub (Any): The token's subject; null for the server token.
            append_only (list[str] | Unset):
            full (bool | Unset): Everything: the server token, an open server.
     """

    rules: list[Rule]
    sub: Any
    append_only: list[str] | Unset = UNSET
    full: bool | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.rule import Rule # noqa: PLC0415
        rules = []
        for rules_item_data in self.rules:
            rules_item = rules_item_data.to_dict()
            rules.append(rules_item)



        sub = self.sub

        append_only: list[str] | Unset = UNSET
        if not isinstance(self.append_only, Unset):
            append_only = self.append_only



        full = self.full


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "rules": rules,
            "sub": sub,
        })
        if append_only is not UNSET:
            field_dict["append_only"] = append_only
        if full is not UNSET:
            field_dict["full"] = full

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.rule import Rule # noqa: PLC0415
        d = dict(src_dict)
        rules = []
        _rules = d.pop("rules")
        for rules_item_data in (_rules):
            rules_item = Rule.from_dict(rules_item_data)



            rules.append(rules_item)


        sub = d.pop("sub")

        append_only = cast(list[str], d.pop("append_only", UNSET))


        full = d.pop("full", UNSET)

        whoami = cls(
            rules=rules,
            sub=sub,
            append_only=append_only,
            full=full,
        )


        whoami.additional_properties = d
        return whoami

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
