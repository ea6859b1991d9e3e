from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.affected import Affected
from ...models.error import Error
from ...models.message import Message
from ...models.query_response_200_type_0_item import QueryResponse200Type0Item
from ...models.statement import Statement
from ...types import UNSET, Unset
from typing import cast



def _get_kwargs(
    *,
    body: Statement,
    fenec_wait: str | Unset = UNSET,
    idempotency_key: str | Unset = UNSET,

) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(fenec_wait, Unset):
        headers["Fenec-Wait"] = fenec_wait

    if not isinstance(idempotency_key, Unset):
        headers["Idempotency-Key"] = idempotency_key



    

    

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/query",
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Affected | list[QueryResponse200Type0Item] | Message | Error | None:
    if response.status_code == 200:
        def _parse_response_200(data: object) -> Affected | list[QueryResponse200Type0Item] | Message:
            try:
                if not isinstance(data, list):
                    raise TypeError()
                response_200_type_0 = []
                _response_200_type_0 = data
                for response_200_type_0_item_data in (_response_200_type_0):
                    response_200_type_0_item = QueryResponse200Type0Item.from_dict(response_200_type_0_item_data)



                    response_200_type_0.append(response_200_type_0_item)

                return response_200_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                response_200_type_1 = Affected.from_dict(data)



                return response_200_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            if not isinstance(data, dict):
                raise TypeError()
            response_200_type_2 = Message.from_dict(data)



            return response_200_type_2

        response_200 = _parse_response_200(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Error.from_dict(response.json())



        return response_400

    if response.status_code == 401:
        response_401 = Error.from_dict(response.json())



        return response_401

    if response.status_code == 403:
        response_403 = Error.from_dict(response.json())



        return response_403

    if response.status_code == 404:
        response_404 = Error.from_dict(response.json())



        return response_404

    if response.status_code == 408:
        response_408 = Error.from_dict(response.json())



        return response_408

    if response.status_code == 409:
        response_409 = Error.from_dict(response.json())



        return response_409

    if response.status_code == 411:
        response_411 = Error.from_dict(response.json())



        return response_411

    if response.status_code == 412:
        response_412 = Error.from_dict(response.json())



        return response_412

    if response.status_code == 413:
        response_413 = Error.from_dict(response.json())



        return response_413

    if response.status_code == 422:
        response_422 = Error.from_dict(response.json())



        return response_422

    if response.status_code == 431:
        response_431 = Error.from_dict(response.json())



        return response_431

    if response.status_code == 500:
        response_500 = Error.from_dict(response.json())



        return response_500

    if response.status_code == 503:
        response_503 = Error.from_dict(response.json())



        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[Affected | list[QueryResponse200Type0Item] | Message | Error]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient | Client,
    body: Statement,
    fenec_wait: str | Unset = UNSET,
    idempotency_key: str | Unset = UNSET,

) -> Response[Affected | list[QueryResponse200Type0Item] | Message | Error]:
    """ Run one FenecQL statement.

    Args:
        fenec_wait (str | Unset):
        idempotency_key (str | Unset):
        body (Statement):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Affected | list[QueryResponse200Type0Item] | Message | Error]
     """


    kwargs = _get_kwargs(
        body=body,
fenec_wait=fenec_wait,
idempotency_key=idempotency_key,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: AuthenticatedClient | Client,
    body: Statement,
    fenec_wait: str | Unset = UNSET,
    idempotency_key: str | Unset = UNSET,

) -> Affected | list[QueryResponse200Type0Item] | Message | Error | None:
    """ Run one FenecQL statement.

    Args:
        fenec_wait (str | Unset):
        idempotency_key (str | Unset):
        body (Statement):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Affected | list[QueryResponse200Type0Item] | Message | Error
     """


    return sync_detailed(
        client=client,
body=body,
fenec_wait=fenec_wait,
idempotency_key=idempotency_key,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient | Client,
    body: Statement,
    fenec_wait: str | Unset = UNSET,
    idempotency_key: str | Unset = UNSET,

) -> Response[Affected | list[QueryResponse200Type0Item] | Message | Error]:
    """ Run one FenecQL statement.

    Args:
        fenec_wait (str | Unset):
        idempotency_key (str | Unset):
        body (Statement):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Affected | list[QueryResponse200Type0Item] | Message | Error]
     """


    kwargs = _get_kwargs(
        body=body,
fenec_wait=fenec_wait,
idempotency_key=idempotency_key,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: AuthenticatedClient | Client,
    body: Statement,
    fenec_wait: str | Unset = UNSET,
    idempotency_key: str | Unset = UNSET,

) -> Affected | list[QueryResponse200Type0Item] | Message | Error | None:
    """ Run one FenecQL statement.

    Args:
        fenec_wait (str | Unset):
        idempotency_key (str | Unset):
        body (Statement):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Affected | list[QueryResponse200Type0Item] | Message | Error
     """


    return (await asyncio_detailed(
        client=client,
body=body,
fenec_wait=fenec_wait,
idempotency_key=idempotency_key,

    )).parsed
