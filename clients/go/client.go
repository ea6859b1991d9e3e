package fenecdb

// The client: transport, token, timeout, waiting, cancellation and idempotency (clients.md §1, §3.3, §3.8).
//
// Every call sends exactly one POST /query (or POST /batch) with its body whole and a Content-Length.
// A call is bounded by the caller's ctx and by the client timeout; on a client made by Wait the timeout
// is extended by the wait it sends, so a held claim is never cut short by the client's own timeout.
// Cancelling ctx abandons the request and closes its connection, which gives a held claim up at the
// server. Copies made by Wait and IdempotencyKey share the connections, the seq and the servers of their
// parent.
//
// Servers (New's url, then WithServers'): the client keeps one of them as its primary, at first the
// first, and sends every write, claim and batch there. Within one call the request moves on when
//   - a server answers 403 with Fenec-Primary (a replica: nothing was done there): that URL becomes the
//     primary (added to the list when it is not in it) and the request is sent there at once, at most
//     maxHops times in one call, then the 403 is the caller's; a 403 naming a server the call could not
//     reach answers that failure instead (a failover under way: the primary it names is gone);
//   - a connection cannot be opened (nothing was sent): the next server of the list, round robin, and
//     the request is sent there, until each server has failed once in the call (then its error is the
//     caller's). A request that was sent and whose answer was lost is never re-sent here;
//   - a server answers 503 with Retry-After while the list has several: the 503 is the caller's, and its
//     next request goes to the next server.
// and the server the call ended on becomes the primary, for every copy at once.
// With WithReadFrom(Replica) the builder's reads (Rows, First, Count, RowsAs) and Read go to a server of
// the list that is not the primary, with Fenec-After: Seq() once the client has seen a seq, so they see
// this client's own writes; a 504 (the replica is behind) or a replica that cannot be reached sends the
// read to the primary.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Client talks to a FenecDB server, or to a primary and its replicas. It is safe for concurrent use.
type Client struct {
	route   *route // shared by every copy
	token   string
	timeout time.Duration
	hc      *http.Client
	seq     *atomic.Int64

	wait    time.Duration
	hasWait bool
	key     string
	hasKey  bool
	err     *QueryError // a refused Wait or IdempotencyKey, returned by every call of this copy

	// ownRetries: the copy a Worker's Run sends through. A request whose answer went missing is the
	// Worker's to retry (after its pause, told as an event), not the transport's: net/http re-sends a
	// request with an Idempotency-Key once, at once and unseen, when a reused connection fails under it.
	ownRetries bool
}

// Option configures New.
type Option func(*Client)

// WithToken sends Authorization: Bearer <token> on every request.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithTimeout bounds each request (30 s by default; 0 for none). A held claim gets its wait on top.
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithHTTPClient sends through hc instead of the package's own client. Leave hc.Timeout at 0: a held
// claim outlasts a fixed timeout, and this client bounds each request itself.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithServers adds servers after New's url: the primary and replicas of one database, in any order. The
// client's primary is at first New's url and follows the servers' answers (see URL).
func WithServers(urls ...string) Option {
	return func(c *Client) {
		for _, u := range urls {
			c.route.add(u)
		}
	}
}

// ReadFrom says where a client sends its reads.
type ReadFrom int

const (
	// Primary: every request goes to the primary (the default).
	Primary ReadFrom = iota
	// Replica: the builder's reads and Read go to a server of the list that is not the primary, with
	// Fenec-After so that they see this client's own writes; to the primary when none answers in time.
	Replica
)

// WithReadFrom says where reads go: Primary (the default) or Replica.
func WithReadFrom(r ReadFrom) Option { return func(c *Client) { c.route.readFrom = r } }

var defaultHTTP = &http.Client{Transport: &http.Transport{
	Proxy:               nil, // a database client speaks to its server, not through an environment proxy
	MaxIdleConnsPerHost: 64,
	IdleConnTimeout:     50 * time.Second, // under the server's 60 s idle close, so no request meets a closed socket
}}

// New makes a client of the server at url, such as "http://127.0.0.1:8080". A trailing / is ignored.
// WithServers gives it more servers of the same database.
func New(url string, opts ...Option) *Client {
	c := &Client{route: &route{watchers: map[int]func(string){}}, timeout: 30 * time.Second, hc: defaultHTTP,
		seq: new(atomic.Int64)}
	c.route.add(url)
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = defaultHTTP
	}
	return c
}

// URL is the server this client sends writes and claims to now: its primary (see the package's comment
// on servers).
func (c *Client) URL() string { return c.route.current() }

// Servers is the client's list of servers: New's url, WithServers', then any primary a replica named.
func (c *Client) Servers() []string {
	c.route.mu.Lock()
	defer c.route.mu.Unlock()
	return slices.Clone(c.route.servers)
}

// Seq is the highest change counter (Fenec-Seq) this client and its copies have seen.
func (c *Client) Seq() int64 { return c.seq.Load() }

// Wait is a copy whose requests carry Fenec-Wait: <d in ms>, so a claim that would take nothing is held
// at the server until it can take something, or for at most d (the server caps it at 30 s). Each of its
// requests is bounded by the client timeout plus d, under the caller's ctx. A negative d is refused
// before sending.
func (c *Client) Wait(d time.Duration) *Client {
	n := *c
	n.wait, n.hasWait = d, true
	if d < 0 && n.err == nil {
		n.err = refuse("wait is a duration from 0 (got %s)", d)
	}
	return &n
}

// IdempotencyKey is a copy whose writes carry Idempotency-Key: key. A retry of the same request with the
// same key is answered what the first answered (Result.Replayed), and runs nothing.
func (c *Client) IdempotencyKey(key string) *Client {
	n := *c
	n.key, n.hasKey = key, true
	if key == "" && n.err == nil {
		n.err = refuse("an idempotency key is a text, not empty")
	}
	return &n
}

// From starts a query on collection, bound to this client.
func (c *Client) From(collection string) *Query {
	q := From(collection)
	q.db = c
	return q
}

// Result is what a write answers.
type Result struct {
	Affected int64  // rows written; len(Rows) when the write answered rows
	Rows     []Row  // the rows of a write with Returning (an empty slice when it took none)
	Message  string // the answer of a schema statement
	Seq      int64  // Fenec-Seq of the answer (0 when the server sent none)
	Replayed bool   // the stored answer of an earlier request under the same Idempotency-Key
}

// Statement is one statement of a batch.
type Statement struct {
	Text   string
	Params []any
}

// Stmt makes a batch statement.
func Stmt(text string, params ...any) Statement { return Statement{Text: text, Params: params} }

// BatchItem is the answer of one statement of a batch: Rows for a read (or a returning), else Affected,
// or Message for a schema statement.
type BatchItem struct {
	Affected int64
	Message  string
	Rows     []Row
}

// BatchResult is what a batch answers.
type BatchResult struct {
	OK       int
	Results  []BatchItem
	Seq      int64
	Replayed bool
}

// answer is one HTTP answer that succeeded.
type answer struct {
	body     []byte
	seq      int64
	replayed bool
}

func encodeBody(text string, params []any) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"query":`)
	t, _ := marshalNoEscape(text)
	b.Write(t)
	b.WriteString(`,"params":`)
	if params == nil {
		params = []any{}
	}
	if err := encodeValue(&b, params); err != nil {
		return nil, err
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// maxHops: the 403s naming a primary one call follows; the next is the caller's error.
const maxHops = 2

// send posts one body to the primary and reads the answer; a status of 400 or more is an *Error. It
// follows a replica's 403 to the primary it names, and a connection that could not be opened to the
// next server (see the package's comment on servers).
func (c *Client) send(ctx context.Context, path, contentType string, body []byte) (answer, error) {
	if c.err != nil {
		return answer{}, c.err
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	return c.toPrimary(ctx, path, contentType, body)
}

// bound gives ctx the client's timeout, with the wait on top for a held claim.
func (c *Client) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	if c.timeout <= 0 {
		return ctx, func() {}
	}
	limit := c.timeout
	if c.hasWait {
		limit += c.wait
	}
	return context.WithTimeout(ctx, limit)
}

// toPrimary sends to the primary, following a replica's 403 and moving on from a server it cannot
// reach, and makes the server it ended on the primary once, at the end of the call: concurrent calls
// and the primary event see a change, not each hop of a failover under way.
func (c *Client) toPrimary(ctx context.Context, path, contentType string, body []byte) (answer, error) {
	url := c.route.current()
	failed := map[string]error{} // the servers this call could not reach, and how
	for hops := 0; ; {
		a, err := c.post(ctx, url, path, contentType, body, 0)
		var e *Error
		switch {
		case errors.As(err, &e) && e.Status == http.StatusForbidden && e.Primary != "":
			named := c.route.add(e.Primary)
			if unreached := failed[named]; unreached != nil {
				// the primary it names could not be reached in this call (a failover under way): that
				// failure is the caller's, retried as any connection that could not be opened
				c.route.set(url)
				return a, unreached
			}
			url = named
			if hops++; hops <= maxHops {
				continue
			}
		case notSent(err) && ctx.Err() == nil:
			failed[url] = err
			next, untried := c.route.after(url, failed)
			url = next
			if untried {
				continue
			}
		case errors.As(err, &e) && e.Status == http.StatusServiceUnavailable && e.retryAfter:
			url, _ = c.route.after(url, nil) // the next attempt tries another server
		}
		c.route.set(url)
		return a, err
	}
}

// sendRead posts a read: to a replica with Fenec-After under WithReadFrom(Replica), to the primary
// when the replica is behind (504) or cannot be reached, or when there is no replica to ask.
func (c *Client) sendRead(ctx context.Context, body []byte) (answer, error) {
	if c.err != nil {
		return answer{}, c.err
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	if c.route.readFrom == Replica {
		if url, ok := c.route.replica(); ok {
			a, err := c.post(ctx, url, "/query", "application/json", body, c.seq.Load())
			var e *Error
			if err == nil || !(notSent(err) || errors.As(err, &e) && e.Status == http.StatusGatewayTimeout) ||
				ctx.Err() != nil {
				return a, err
			}
		}
	}
	return c.toPrimary(ctx, "/query", "application/json", body)
}

// notSent tells a request whose connection could not be opened: nothing reached a server.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// post sends one request to the server at url (after > 0: with Fenec-After) and reads its answer.
func (c *Client) post(ctx context.Context, url, path, contentType string, body []byte, after int64) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+path, bytes.NewReader(body))
	if err != nil {
		return answer{}, fmt.Errorf("fenecdb: %w", err)
	}
	if c.ownRetries {
		req.GetBody = nil // a body that cannot be rewound is never re-sent by the transport
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.hasKey {
		req.Header.Set("Idempotency-Key", c.key)
	}
	if c.hasWait {
		req.Header.Set("Fenec-Wait", strconv.FormatInt(c.wait.Milliseconds(), 10))
	}
	if after > 0 {
		req.Header.Set("Fenec-After", strconv.FormatInt(after, 10))
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("fenecdb: POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, fmt.Errorf("fenecdb: POST %s: reading the answer: %w", path, err)
	}
	if resp.StatusCode >= 400 {
		e := serverError(resp.StatusCode, data)
		if resp.StatusCode == http.StatusForbidden {
			e.Primary = strings.TrimRight(strings.TrimSpace(resp.Header.Get("Fenec-Primary")), "/")
		}
		e.retryAfter = resp.Header.Get("Retry-After") != ""
		return answer{}, e
	}
	a := answer{body: data, replayed: strings.EqualFold(resp.Header.Get("Idempotent-Replayed"), "true")}
	if s := resp.Header.Get("Fenec-Seq"); s != "" {
		if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil {
			a.seq = n
			for {
				old := c.seq.Load()
				if n <= old || c.seq.CompareAndSwap(old, n) {
					break
				}
			}
		}
	}
	return a, nil
}

func serverError(status int, body []byte) *Error {
	e := &Error{Status: status, Code: CodeOf(status), At: -1}
	var parsed struct {
		Error     *string `json:"error"`
		At        *int    `json:"at"`
		Completed *int    `json:"completed"`
	}
	if json.Unmarshal(body, &parsed) == nil && parsed.Error != nil {
		e.Message = *parsed.Error
		if parsed.At != nil {
			e.At = *parsed.At
		}
		if parsed.Completed != nil {
			e.Completed = *parsed.Completed
		}
	} else {
		e.Message = strings.TrimSpace(string(body))
		if e.Message == "" {
			e.Message = http.StatusText(status)
		}
	}
	return e
}

// run sends one statement to /query: to the primary, or where reads go when it is a read.
func (c *Client) run(ctx context.Context, text string, params []any, read bool) (answer, error) {
	body, err := encodeBody(text, params)
	if err != nil {
		return answer{}, err
	}
	if read {
		return c.sendRead(ctx, body)
	}
	return c.send(ctx, "/query", "application/json", body)
}

// Query runs one statement of text on the primary and answers its rows (nil for an answer that is not rows).
func (c *Client) Query(ctx context.Context, text string, params ...any) ([]Row, error) {
	return c.query(ctx, text, params, false)
}

// Read runs one statement of text that cannot write (a get) where reads go (WithReadFrom), and answers
// its rows. A replica refuses a statement that writes.
func (c *Client) Read(ctx context.Context, text string, params ...any) ([]Row, error) {
	return c.query(ctx, text, params, true)
}

func (c *Client) query(ctx context.Context, text string, params []any, read bool) ([]Row, error) {
	a, err := c.run(ctx, text, params, read)
	if err != nil {
		return nil, err
	}
	return a.rows()
}

// Exec runs one statement of text and answers what it wrote.
func (c *Client) Exec(ctx context.Context, text string, params ...any) (Result, error) {
	a, err := c.run(ctx, text, params, false)
	if err != nil {
		return Result{}, err
	}
	return toResult(a)
}

func toResult(a answer) (Result, error) {
	res := Result{Seq: a.seq, Replayed: a.replayed}
	v, err := decodeAnswer(a.body)
	if err != nil {
		return res, err
	}
	if rows, ok := toRows(v); ok {
		res.Rows, res.Affected = rows, int64(len(rows))
		return res, nil
	}
	if m, ok := v.(map[string]any); ok {
		res.Affected, _ = m["affected"].(int64)
		res.Message, _ = m["message"].(string)
		return res, nil
	}
	return res, fmt.Errorf("fenecdb: an answer of an unknown shape: %.200s", a.body)
}

// rows decodes the answer's rows (none where it is not a list of rows).
func (a answer) rows() ([]Row, error) {
	v, err := decodeAnswer(a.body)
	if err != nil {
		return nil, err
	}
	rows, _ := toRows(v)
	return rows, nil
}

func toRows(v any) ([]Row, bool) {
	list, ok := v.([]any)
	if !ok {
		return nil, false
	}
	rows := make([]Row, 0, len(list))
	for _, e := range list {
		m, _ := e.(map[string]any)
		rows = append(rows, Row(m))
	}
	return rows, true
}

// Batch runs statements as one all-or-nothing block (POST /batch). A statement that fails puts back
// every one before it; the *Error then has At, the index of that statement.
func (c *Client) Batch(ctx context.Context, statements ...Statement) (BatchResult, error) {
	var body bytes.Buffer
	for _, s := range statements {
		line, err := encodeBody(s.Text, s.Params)
		if err != nil {
			return BatchResult{}, err
		}
		body.Write(line)
		body.WriteByte('\n')
	}
	a, err := c.send(ctx, "/batch", "application/x-ndjson", body.Bytes())
	if err != nil {
		return BatchResult{}, err
	}
	res := BatchResult{Seq: a.seq, Replayed: a.replayed}
	v, err := decodeAnswer(a.body)
	if err != nil {
		return res, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return res, fmt.Errorf("fenecdb: a batch answer of an unknown shape: %.200s", a.body)
	}
	okCount, _ := m["ok"].(int64)
	res.OK = int(okCount)
	items, _ := m["results"].([]any)
	for _, it := range items {
		var item BatchItem
		if rows, ok := toRows(it); ok { // a bare list of rows, as some servers answer a read
			item.Rows, item.Affected = rows, int64(len(rows))
			res.Results = append(res.Results, item)
			continue
		}
		im, _ := it.(map[string]any)
		item.Affected, _ = im["affected"].(int64)
		item.Message, _ = im["message"].(string)
		if rows, ok := toRows(im["rows"]); ok {
			item.Rows, item.Affected = rows, int64(len(rows))
		}
		res.Results = append(res.Results, item)
	}
	return res, nil
}

// ---- endpoints of the builder

func (q *Query) client() (*Client, error) {
	if q.db == nil {
		return nil, refuse("this query has no client: start it with db.From to send it")
	}
	return q.db, nil
}

func (q *Query) sendRead(ctx context.Context, first, count bool) (answer, error) {
	text, params, err := q.readText(first, count)
	if err != nil {
		return answer{}, err
	}
	db, err := q.client()
	if err != nil {
		return answer{}, err
	}
	return db.run(ctx, text, params, true)
}

// Rows sends the read and answers its rows.
func (q *Query) Rows(ctx context.Context) ([]Row, error) {
	a, err := q.sendRead(ctx, false, false)
	if err != nil {
		return nil, err
	}
	return a.rows()
}

// First sends the read with limit 1 (a read require kept) and answers its row, or nil.
func (q *Query) First(ctx context.Context) (Row, error) {
	a, err := q.sendRead(ctx, true, false)
	if err != nil {
		return nil, err
	}
	rows, err := a.rows()
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, nil
	}
	return rows[0], nil
}

// Count sends the read with count and answers the number.
func (q *Query) Count(ctx context.Context) (int64, error) {
	a, err := q.sendRead(ctx, false, true)
	if err != nil {
		return 0, err
	}
	rows, err := a.rows()
	if err != nil {
		return 0, err
	}
	if len(rows) != 1 {
		return 0, fmt.Errorf("fenecdb: a count answered %.200s", a.body)
	}
	n, ok := rows[0]["count"].(int64)
	if !ok {
		return 0, fmt.Errorf("fenecdb: a count answered %.200s", a.body)
	}
	return n, nil
}

// RowsAs sends the read of q and decodes its rows into T, by their json names.
func RowsAs[T any](ctx context.Context, q *Query) ([]T, error) {
	a, err := q.sendRead(ctx, false, false)
	if err != nil {
		return nil, err
	}
	var out []T
	if err := json.Unmarshal(a.body, &out); err != nil {
		return nil, fmt.Errorf("fenecdb: decoding rows into %T: %w", out, err)
	}
	return out, nil
}

// Insert puts one document or several: Insert(ctx, doc), Insert(ctx, d1, d2, Require(2)), or a slice of
// documents. No document at all sends nothing and answers 0.
func (q *Query) Insert(ctx context.Context, docsAndOptions ...any) (Result, error) {
	if q.err == nil {
		if docs, _ := splitArgs(docsAndOptions); len(docs) == 0 || (len(docs) == 1 && isEmptyList(docs[0])) {
			if err := q.writeChecks("insert"); err != nil {
				return Result{}, err
			}
			return Result{}, nil
		}
	}
	text, params, _, err := q.insertText(docsAndOptions)
	if err != nil {
		return Result{}, err
	}
	return q.sendWrite(ctx, text, params)
}

func isEmptyList(v any) bool {
	if _, isDoc := v.(Doc); isDoc {
		return false
	}
	list, ok := listOf(v)
	return ok && len(list) == 0
}

// Update sets patch on the rows the chain picks. Options: All, Require, Returning.
func (q *Query) Update(ctx context.Context, patch any, opts ...WriteOption) (Result, error) {
	text, params, err := q.updateText(patch, collectOptions(opts))
	if err != nil {
		return Result{}, err
	}
	return q.sendWrite(ctx, text, params)
}

// Delete deletes the rows the chain picks. Options: All, Require, Returning (a pop).
func (q *Query) Delete(ctx context.Context, opts ...WriteOption) (Result, error) {
	text, params, err := q.deleteText(collectOptions(opts))
	if err != nil {
		return Result{}, err
	}
	return q.sendWrite(ctx, text, params)
}

func (q *Query) sendWrite(ctx context.Context, text string, params []any) (Result, error) {
	db, err := q.client()
	if err != nil {
		return Result{}, err
	}
	a, err := db.run(ctx, text, params, false)
	if err != nil {
		return Result{}, err
	}
	return toResult(a)
}

// route is the servers of a client and its copies, and which is the primary now.
type route struct {
	readFrom ReadFrom // set by New's options, read only after

	mu       sync.Mutex
	servers  []string
	primary  int
	reads    int // the round robin of replica reads
	watchers map[int]func(url string)
	watchID  int
}

// add puts url in the list when it is not there, and answers it as listed.
func (r *route) add(url string) string {
	url = strings.TrimRight(url, "/")
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Contains(r.servers, url) {
		r.servers = append(r.servers, url)
	}
	return url
}

func (r *route) current() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.servers[r.primary]
}

// after answers the server after from, round robin, that is not in failed; with every server failed,
// the one right after from, and false.
func (r *route) after(from string, failed map[string]error) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := max(0, slices.Index(r.servers, from))
	for k := 1; k <= len(r.servers); k++ {
		if s := r.servers[(start+k)%len(r.servers)]; failed[s] == nil {
			return s, true
		}
	}
	return r.servers[(start+1)%len(r.servers)], false
}

// set makes url (one of the list) the primary, and tells the watchers when it changed.
func (r *route) set(url string) {
	r.mu.Lock()
	i := slices.Index(r.servers, url)
	if i < 0 || r.primary == i {
		r.mu.Unlock()
		return
	}
	r.primary = i
	watchers := make([]func(string), 0, len(r.watchers))
	for _, w := range r.watchers {
		watchers = append(watchers, w)
	}
	r.mu.Unlock()
	for _, w := range watchers {
		w(url)
	}
}

// replica answers the next server, round robin, that is not the primary; false when there is none.
func (r *route) replica() (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := 0; k < len(r.servers); k++ {
		r.reads = (r.reads + 1) % len(r.servers)
		if r.reads != r.primary {
			return r.servers[r.reads], true
		}
	}
	return "", false
}

// watch calls fn with the new primary's URL each time it changes, until the answered func is called.
func (r *route) watch(fn func(url string)) func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watchID++
	id := r.watchID
	r.watchers[id] = fn
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.watchers, id) // a second call finds nothing to delete
	}
}
