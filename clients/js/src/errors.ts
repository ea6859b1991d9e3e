/**
 * The one error type of the client, and the map from an HTTP status to its code.
 *
 *   Error
 *   └── FenecError            builder refusals (no `status`) and server refusals (`status` set)
 *
 * A cancelled request is not a FenecError: it rejects with the platform's AbortError (or the
 * reason the caller's signal was aborted with, such as AbortSignal.timeout's TimeoutError).
 * A network failure rejects with the platform's TypeError from fetch.
 */

/** Codes a server refusal carries, named as clients.md §1 names them for every SDK. */
export type FenecCode =
  | 'builder'
  | 'bad_request'
  | 'unauthorized'
  | 'forbidden'
  | 'not_found'
  | 'conflict'
  | 'unmet'
  | 'key_reused'
  | 'unavailable'
  | 'timeout'
  | 'storage_full'
  | `http_${number}`;

const CODES: Record<number, FenecCode> = {
  400: 'bad_request',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'not_found',
  409: 'conflict',
  412: 'unmet',
  422: 'key_reused',
  503: 'unavailable',
  504: 'timeout',
  507: 'storage_full',
};

/** The code of a server refusal with this status. */
export function codeOf(status: number): FenecCode {
  return CODES[status] ?? `http_${status}`;
}

export interface FenecErrorDetails {
  /** The HTTP status of a server refusal. A builder refusal has none. */
  status?: number;
  /** In a batch, the index (from 0) of the statement that stopped it. */
  at?: number;
  /** In a batch, how many statements stayed applied (0: a batch lands whole). */
  completed?: number;
}

export class FenecError extends Error {
  /** The HTTP status of a server refusal; `undefined` for a refusal of the builder. */
  readonly status: number | undefined;
  /** `builder` for a builder refusal, else the code of the status (412 is `unmet`). */
  readonly code: FenecCode;
  readonly at: number | undefined;
  readonly completed: number | undefined;

  constructor(message: string, details: FenecErrorDetails = {}) {
    super(message);
    this.name = 'FenecError';
    this.status = details.status;
    this.code = details.status === undefined ? 'builder' : codeOf(details.status);
    this.at = details.at;
    this.completed = details.completed;
  }
}

/** A refusal of the builder: raised at the step that is wrong, before any request. */
export function refuse(message: string): never {
  throw new FenecError(message);
}
