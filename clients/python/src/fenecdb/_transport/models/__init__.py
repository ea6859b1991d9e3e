""" Contains all the data models used in inputs/outputs """

from .affected import Affected
from .batch_answer import BatchAnswer
from .batch_answer_results_item_type_0 import BatchAnswerResultsItemType0
from .batch_answer_results_item_type_0_rows_item import BatchAnswerResultsItemType0RowsItem
from .batch_error import BatchError
from .collection import Collection
from .error import Error
from .field import Field
from .health import Health
from .message import Message
from .openapi_response_200 import OpenapiResponse200
from .query_response_200_type_0_item import QueryResponse200Type0Item
from .root import Root
from .rule import Rule
from .statement import Statement
from .whoami import Whoami

__all__ = (
    "Affected",
    "BatchAnswer",
    "BatchAnswerResultsItemType0",
    "BatchAnswerResultsItemType0RowsItem",
    "BatchError",
    "Collection",
    "Error",
    "Field",
    "Health",
    "Message",
    "OpenapiResponse200",
    "QueryResponse200Type0Item",
    "Root",
    "Rule",
    "Statement",
    "Whoami",
)
