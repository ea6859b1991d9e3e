package fenecdb

// Client tests with no server: an httptest listener plays the server, so what goes over the wire (body,
// headers) and how answers and refusals come back are checked exactly.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type fakeServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []*http.Request
	bodies   []string
}

// fake starts a server answering every request with handle (nil: 200 {"affected":1}).
func fake(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, body string)) *fakeServer {
	t.Helper()
	f := &fakeServer{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.requests = append(f.requests, r)
		f.bodies = append(f.bodies, string(b))
		f.mu.Unlock()
		if handle == nil {
			io.WriteString(w, `{"affected":1}`)
			return
		}
		handle(w, r, string(b))
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeServer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func (f *fakeServer) last() (*http.Request, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[len(f.requests)-1], f.bodies[len(f.bodies)-1]
}

var bg = context.Background()

func TestRequestCarriesBodyAndHeaders(t *testing.T) {
	f := fake(t, nil)
	db := New(f.URL+"/", WithToken("s3cret"))
	_, err := db.Wait(1500*time.Millisecond).IdempotencyKey("k-1").From("jobs").Where("id", "=", 7).
		Delete(bg, Require(1))
	if err != nil {
		t.Fatal(err)
	}
	r, body := f.last()
	if r.URL.Path != "/query" || r.Method != "POST" {
		t.Fatalf("sent %s %s", r.Method, r.URL.Path)
	}
	want := `{"query":"del jobs where id = $1 require 1","params":[7]}`
	if body != want {
		t.Fatalf("body %s, want %s", body, want)
	}
	for name, want := range map[string]string{
		"Authorization": "Bearer s3cret", "Fenec-Wait": "1500", "Idempotency-Key": "k-1",
		"Content-Type": "application/json", "Content-Length": "57",
	} {
		if got := r.Header.Get(name); got != want && !(name == "Content-Length" && r.ContentLength == 57) {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	if len(r.TransferEncoding) != 0 {
		t.Errorf("a chunked body: %v", r.TransferEncoding)
	}
	// the parent client carries neither the wait nor the key
	if _, err := db.From("jobs").Where("id", "=", 7).Delete(bg); err != nil {
		t.Fatal(err)
	}
	r, _ = f.last()
	if r.Header.Get("Fenec-Wait") != "" || r.Header.Get("Idempotency-Key") != "" {
		t.Fatalf("the parent sent %v", r.Header)
	}
}

func TestSeqIsSharedAndReplayedRead(t *testing.T) {
	var seq atomic.Int64
	f := fake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		w.Header().Set("Fenec-Seq", strings.TrimSpace(" "+itoa(seq.Add(1))))
		if r.Header.Get("Idempotency-Key") != "" {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		io.WriteString(w, `[{"id":1,"attempts":2,"score":1.5,"payload":{"n":9007199254740993}}]`)
	})
	db := New(f.URL)
	copyOf := db.IdempotencyKey("k")
	res, err := copyOf.From("jobs").Where("id", "=", 1).Update(bg, D("a", 1), Returning("*"))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Replayed || res.Seq != 1 || db.Seq() != 1 || res.Affected != 1 {
		t.Fatalf("result %+v, parent seq %d", res, db.Seq())
	}
	row := res.Rows[0]
	if row["id"] != int64(1) || row["score"] != 1.5 {
		t.Fatalf("row %#v", row)
	}
	if n := row["payload"].(map[string]any)["n"]; n != int64(9007199254740993) {
		t.Fatalf("a large integer came back as %v (%T)", n, n)
	}
	res, err = db.From("jobs").Where("id", "=", 1).Update(bg, D("a", 1))
	if err != nil || res.Replayed || db.Seq() != 2 || copyOf.Seq() != 2 {
		t.Fatalf("%+v %v, seq %d/%d", res, err, db.Seq(), copyOf.Seq())
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestServerRefusals(t *testing.T) {
	cases := []struct {
		status int
		body   string
		code   Code
		msg    string
		at     int
	}{
		{412, "{\"error\":\"`del jobs` wrote 0 rows, and requires 1\"}", CodeUnmet, "`del jobs` wrote 0 rows, and requires 1", -1},
		{400, `{"error":"unmet: nope","completed":0,"at":1}`, CodeBadRequest, "unmet: nope", 1},
		{401, `{"error":"no token"}`, CodeUnauthorized, "no token", -1},
		{403, `{"error":"the server is in read-only mode"}`, CodeForbidden, "the server is in read-only mode", -1},
		{404, `{"error":"no collection jobs"}`, CodeNotFound, "no collection jobs", -1},
		{409, `{"error":"id 1 is taken"}`, CodeConflict, "id 1 is taken", -1},
		{422, `{"error":"this Idempotency-Key came with another request: a key is for one"}`, CodeKeyReused, "this Idempotency-Key came with another request: a key is for one", -1},
		{503, `{"error":"too many connections"}`, CodeUnavailable, "too many connections", -1},
		{507, `{"error":"full"}`, CodeStorageFull, "full", -1},
		{500, `not json`, Code("http_500"), "not json", -1},
	}
	for _, c := range cases {
		f := fake(t, func(w http.ResponseWriter, r *http.Request, body string) {
			w.WriteHeader(c.status)
			io.WriteString(w, c.body)
		})
		_, err := New(f.URL).Exec(bg, "del jobs where id = 1 require 1")
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("%d: %T %v", c.status, err, err)
		}
		if e.Status != c.status || e.Code != c.code || e.Message != c.msg || e.At != c.at {
			t.Errorf("%d: %+v", c.status, e)
		}
	}
}

func TestTimeoutIsExtendedByTheWait(t *testing.T) {
	f := fake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		time.Sleep(300 * time.Millisecond)
		io.WriteString(w, `[]`)
	})
	db := New(f.URL, WithTimeout(150*time.Millisecond))
	q := db.From("jobs").Where("id", "=", 1)
	if _, err := q.Delete(bg, Returning("*")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("without a wait: %v", err)
	}
	res, err := db.Wait(400*time.Millisecond).From("jobs").Where("id", "=", 1).Delete(bg, Returning("*"))
	if err != nil || res.Rows == nil || len(res.Rows) != 0 {
		t.Fatalf("with a wait: %+v %v", res, err)
	}
}

func TestCancelGivesTheRequestUp(t *testing.T) {
	gone := make(chan struct{})
	f := fake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		select {
		case <-r.Context().Done(): // the client closed the connection
			close(gone)
		case <-time.After(5 * time.Second):
		}
	})
	ctx, cancel := context.WithCancel(bg)
	time.AfterFunc(100*time.Millisecond, cancel)
	started := time.Now()
	_, err := New(f.URL).Wait(30*time.Second).From("jobs").Limit(1).Delete(ctx, Returning("*"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	if d := time.Since(started); d > 10*time.Second { // at the cancel, not the 30 s wait
		t.Fatalf("cancelled after %s", d)
	}
	select {
	case <-gone:
	case <-time.After(2 * time.Second):
		t.Fatal("the server never saw the connection close")
	}
}

func TestRefusedBeforeSending(t *testing.T) {
	f := fake(t, nil)
	db := New(f.URL)
	var qe *QueryError
	_, err := db.Wait(-time.Second).From("jobs").Where("id", "=", 1).Delete(bg)
	if !errors.As(err, &qe) || qe.Message != "wait is a duration from 0 (got -1s)" {
		t.Fatalf("negative wait: %v", err)
	}
	_, err = db.IdempotencyKey("").Exec(bg, "del jobs where id = 1")
	if !errors.As(err, &qe) || qe.Message != "an idempotency key is a text, not empty" {
		t.Fatalf("empty key: %v", err)
	}
	_, err = db.From("jobs").Update(bg, D("owner", nil))
	if !errors.As(err, &qe) || err.Error() != "fenecdb: "+qe.Message {
		t.Fatalf("unfiltered: %v", err)
	}
	_, err = From("jobs").Rows(bg)
	if !errors.As(err, &qe) {
		t.Fatalf("an unbound endpoint: %v", err)
	}
	res, err := db.From("jobs").Insert(bg)
	if err != nil || res.Affected != 0 {
		t.Fatalf("insert of nothing: %+v %v", res, err)
	}
	res, err = db.From("jobs").Insert(bg, []Doc{}, Require(0))
	if err != nil || res.Affected != 0 {
		t.Fatalf("insert of an empty list: %+v %v", res, err)
	}
	if n := f.count(); n != 0 {
		t.Fatalf("%d requests were sent", n)
	}
}

func TestReadsAnswer(t *testing.T) {
	f := fake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		switch {
		case strings.Contains(body, " count"):
			io.WriteString(w, `[{"count":42}]`)
		case strings.Contains(body, "limit 1"):
			io.WriteString(w, `[]`)
		default:
			io.WriteString(w, `[{"id":1,"title":"a"},{"id":2,"title":"b"}]`)
		}
	})
	q := New(f.URL).From("notes")
	n, err := q.Count(bg)
	if err != nil || n != 42 {
		t.Fatalf("count %d %v", n, err)
	}
	row, err := q.Where("id", "=", 3).First(bg)
	if err != nil || row != nil {
		t.Fatalf("first %v %v", row, err)
	}
	rows, err := q.Rows(bg)
	if err != nil || len(rows) != 2 || rows[1]["title"] != "b" {
		t.Fatalf("rows %v %v", rows, err)
	}
	type note struct {
		ID    int64  `json:"id"`
		Title string `json:"title"`
	}
	notes, err := RowsAs[note](bg, q)
	if err != nil || len(notes) != 2 || notes[0] != (note{1, "a"}) {
		t.Fatalf("RowsAs %v %v", notes, err)
	}
}

func TestBatch(t *testing.T) {
	f := fake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		w.Header().Set("Fenec-Seq", "9")
		io.WriteString(w, `{"ok":3,"results":[{"affected":1},{"rows":[{"id":7}]},{"message":"made"}]}`)
	})
	db := New(f.URL)
	text, params, err := db.From("jobs").Where("id", "=", 7).ToDelete(Require(1))
	if err != nil {
		t.Fatal(err)
	}
	res, err := db.Batch(bg, Stmt(text, params...), Stmt("get jobs"), Stmt("create collection x (a int)"))
	if err != nil {
		t.Fatal(err)
	}
	r, body := f.last()
	want := `{"query":"del jobs where id = $1 require 1","params":[7]}` + "\n" +
		`{"query":"get jobs","params":[]}` + "\n" + `{"query":"create collection x (a int)","params":[]}` + "\n"
	if r.URL.Path != "/batch" || body != want || r.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("%s %q %q", r.URL.Path, body, r.Header.Get("Content-Type"))
	}
	if res.OK != 3 || res.Seq != 9 || res.Results[0].Affected != 1 || res.Results[1].Rows[0]["id"] != int64(7) ||
		res.Results[2].Message != "made" {
		t.Fatalf("%+v", res)
	}
}

func TestValuesOnTheWire(t *testing.T) {
	type job struct {
		To   string `json:"to"`
		Tags []string
		Skip string `json:"-"`
	}
	when := time.Date(2025, 3, 1, 10, 0, 0, 5e8, time.FixedZone("x", 2*3600))
	text, params, err := From("jobs").ToInsert(
		D("payload", job{To: "ada", Tags: []string{"a"}}, "at", when, "m", map[string]any{"b": 1, "a": when},
			"v", []float32{0.5, -0.25}, "big", int64(1)<<60, "f", 2.0),
		map[string]any{"z": 1, "a": nil},
		job{To: "bo"})
	if err != nil {
		t.Fatal(err)
	}
	if text != "put jobs [{payload: $1, at: $2, m: $3, v: $4, big: $5, f: $6}, {a: $7, z: $8}, {to: $9, Tags: $10}]" {
		t.Fatalf("text %s", text)
	}
	body, err := encodeBody(text, params)
	if err != nil {
		t.Fatal(err)
	}
	want := `"params":[{"to":"ada","Tags":["a"]},"2025-03-01T08:00:00.500Z",{"a":"2025-03-01T08:00:00.500Z","b":1},` +
		`[0.5,-0.25],1152921504606846976,2,null,1,"bo",null]`
	if !strings.HasSuffix(string(body), want+"}") {
		t.Fatalf("body %s", body)
	}
}

func TestQueriesAreImmutableAndShared(t *testing.T) {
	base := From("jobs").Where("queue", "=", "mail")
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			q := base.Where("n", "=", i).Order("id", "asc").Limit(int64(i)).Select("id")
			text, params, err := q.ToFenecQL()
			if err != nil || text != "get jobs select id where queue = $1 and n = $2 order id asc limit "+itoa(int64(i)) ||
				params[1] != i {
				t.Errorf("%d: %s %v %v", i, text, params, err)
			}
		}(i)
	}
	wg.Wait()
	if text, _, _ := base.ToFenecQL(); text != "get jobs where queue = $1" {
		t.Fatalf("the base changed: %s", text)
	}
	// a refused step keeps the first refusal, and the chain before it is untouched
	bad := base.Limit(-1).Order("id", "sideways")
	if _, _, err := bad.ToFenecQL(); err == nil || err.(*QueryError).Message != "limit must be a non-negative integer: -1" {
		t.Fatalf("first refusal: %v", err)
	}
	if _, _, err := base.ToFenecQL(); err != nil {
		t.Fatal(err)
	}
}

func TestConditionHelpers(t *testing.T) {
	q := From("tasks").WhereCond(Fields("state", "open", "priority", Ops("gte", 2, "not", nil), "x", map[string]any{"lt": 9})).
		OrWhereCond(And(Cmp("a", "in", []int{1, 2}), Not(Raw("b = ?", true))))
	text, params, err := q.ToFenecQL()
	if err != nil {
		t.Fatal(err)
	}
	if text != "get tasks where (state = $1 and priority >= $2 and priority is not null and x < $3) or (a in [$4, $5] and not (b = $6))" {
		t.Fatalf("%s", text)
	}
	if len(params) != 6 || params[3] != 1 || params[5] != true {
		t.Fatalf("%v", params)
	}
	for _, c := range []struct {
		q    *Query
		want string
	}{
		{From("t").WhereCond(Fields("a")), "Fields takes names and specs in pairs (got 1 arguments)"},
		{From("t").WhereCond(Fields("a", Ops("gt"))), "Ops takes operators and values in pairs (got 1 arguments)"},
		{From("t").Where("a", "=", Inc(1)), "inc() reads the row it changes: use it in update (field: a)"},
		{From("t").Where("a", "=", Inc("x")), `inc() takes a number: "x"`},
	} {
		_, _, err := c.q.ToFenecQL()
		var qe *QueryError
		if !errors.As(err, &qe) || qe.Message != c.want {
			t.Errorf("%v, want %s", err, c.want)
		}
	}
}
