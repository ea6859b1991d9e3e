from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.affected import Affected
  from ..models.batch_answer_results_item_type_0 import BatchAnswerResultsItemType0
  from ..models.message import Message





T = TypeVar("T", bound="BatchAnswer")



@_attrs_define
class BatchAnswer:
    """ 
        Attributes:
            ok (int):
            results (list[Affected | BatchAnswerResultsItemType0 | Message]):
     """

    ok: int
    results: list[Affected | BatchAnswerResultsItemType0 | Message]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.affected import Affected # noqa: PLC0415
        from ..models.batch_answer_results_item_type_0 import BatchAnswerResultsItemType0 # noqa: PLC0415
        from ..models.message import Message # noqa: PLC0415
        ok = self.ok

        results = []
        for results_item_data in self.results:
            results_item: dict[str, Any]
            if isinstance(results_item_data, BatchAnswerResultsItemType0):
                results_item = results_item_data.to_dict()
            elif isinstance(results_item_data, Affected):
                results_item = results_item_data.to_dict()
            else:
                results_item = results_item_data.to_dict()

            results.append(results_item)




        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "ok": ok,
            "results": results,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.affected import Affected # noqa: PLC0415
        from ..models.batch_answer_results_item_type_0 import BatchAnswerResultsItemType0 # noqa: PLC0415
        from ..models.message import Message # noqa: PLC0415
        d = dict(src_dict)
        ok = d.pop("ok")

        results = []
        _results = d.pop("results")
        for results_item_data in (_results):
            def _parse_results_item(data: object) -> Affected | BatchAnswerResultsItemType0 | Message:
                try:
                    if not isinstance(data, dict):
                        raise TypeError()
                    results_item_type_0 = BatchAnswerResultsItemType0.from_dict(data)



                    return results_item_type_0
                except (TypeError, ValueError, AttributeError, KeyError):
                    pass
                try:
                    if not isinstance(data, dict):
                        raise TypeError()
                    results_item_type_1 = Affected.from_dict(data)



                    return results_item_type_1
                except (TypeError, ValueError, AttributeError, KeyError):
                    pass
                if not isinstance(data, dict):
                    raise TypeError()
                results_item_type_2 = Message.from_dict(data)



                return results_item_type_2

            results_item = _parse_results_item(results_item_data)

            results.append(results_item)


        batch_answer = cls(
            ok=ok,
            results=results,
        )


        batch_answer.additional_properties = d
        return batch_answer

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
