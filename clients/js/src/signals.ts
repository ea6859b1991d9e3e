/**
 * The signals a request goes with, built by hand rather than with AbortSignal.any/timeout so that
 * Node 20.0–20.2 work too: a caller's signal bounded by a timeout, and two signals joined.
 */

/** A signal aborted with `parent`'s reason (if any), or after `ms` with a TimeoutError; `release` when done. */
export function deadline(parent: AbortSignal | undefined, ms: number): { signal: AbortSignal; release: () => void } {
  const ctl = new AbortController();
  const onAbort = () => ctl.abort(parent?.reason);
  if (parent?.aborted) ctl.abort(parent.reason);
  else parent?.addEventListener('abort', onAbort, { once: true });
  const timer = setTimeout(
    () => ctl.abort(new DOMException(`the request took more than ${ms} ms`, 'TimeoutError')),
    ms,
  );
  return {
    signal: ctl.signal,
    release: () => {
      clearTimeout(timer);
      parent?.removeEventListener('abort', onAbort);
    },
  };
}

/** A signal aborted when either is; `release` takes its listeners off the two. */
export function either(a: AbortSignal, b: AbortSignal): { signal: AbortSignal; release: () => void } {
  const ctl = new AbortController();
  const fromA = () => ctl.abort(a.reason);
  const fromB = () => ctl.abort(b.reason);
  if (a.aborted) fromA();
  else if (b.aborted) fromB();
  a.addEventListener('abort', fromA, { once: true });
  b.addEventListener('abort', fromB, { once: true });
  return {
    signal: ctl.signal,
    release: () => {
      a.removeEventListener('abort', fromA);
      b.removeEventListener('abort', fromB);
    },
  };
}
