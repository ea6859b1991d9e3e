// A capture transport: an injected fetch that records each request and answers as
// conformance.md A.4 says (a count read [{count: 0}], a read or a returning write [], else {affected: 0}).
export function captureFetch(answer) {
  const sent = [];
  const fetch = async (url, init) => {
    const headers = Object.fromEntries(Object.entries(init.headers ?? {}).map(([k, v]) => [k.toLowerCase(), v]));
    const req = { url: String(url), method: init.method, headers, body: init.body };
    if (String(url).endsWith('/query')) {
      const { query, params } = JSON.parse(init.body);
      req.text = query;
      req.params = params;
    }
    sent.push(req);
    const body = answer ? answer(req) : cannedAnswer(req.text ?? '');
    const status = body?.status ?? 200;
    const payload = body?.status ? body.body : body;
    return new Response(JSON.stringify(payload), {
      status,
      headers: { 'content-type': 'application/json', ...(body?.headers ?? {}) },
    });
  };
  return { fetch, sent };
}

export function cannedAnswer(text) {
  if (text.startsWith('put ')) return { affected: 0 };
  if (text.startsWith('set ') || text.startsWith('del ')) return / returning /.test(text) ? [] : { affected: 0 };
  if (text.endsWith(' count')) return [{ count: 0 }];
  return [];
}
