// Preloaded (node --import) into the processes that run the README's blocks and the seed worker
// unchanged: their `connect('http://127.0.0.1:8080')` reaches the test's server on its free port,
// `console.log(x)` writes x as JSON (for the `// → v` checks), and each ack answered 1 is reported.
const target = process.env.FENEC_TEST_URL;
const PAGE_URL = 'http://127.0.0.1:8080';
const platformFetch = globalThis.fetch;

globalThis.fetch = async (input, init = {}) => {
  let url = String(input);
  if (target && url.startsWith(PAGE_URL)) url = target + url.slice(PAGE_URL.length);
  const res = await platformFetch(url, init);
  if (process.env.FENEC_REPORT_ACKS === '1' && typeof init.body === 'string' && url.endsWith('/query')) {
    const { query, params } = JSON.parse(init.body);
    const auth = new Headers(init.headers).get('authorization');
    if (/^del \w+ where id = \$1 and owner = \$2 require 1$/.test(query) && res.status === 200) {
      const answer = await res.clone().json();
      if (answer.affected === 1) process.stdout.write(`ACK ${JSON.stringify(params[0])} ${JSON.stringify(auth)}\n`);
    }
  }
  return res;
};

if (process.env.FENEC_JSON_LOG === '1') {
  console.log = (...args) => {
    process.stdout.write(args.map((a) => (a === undefined ? 'undefined' : JSON.stringify(a))).join(' ') + '\n');
  };
}
