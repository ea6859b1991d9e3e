package fenecdb_test

// The README's examples, run as tests. The ones that talk to a server read its address from
// FENECDB_URL, as a program of yours may (test.sh starts a fenec-server and sets it); without it,
// TestMain skips them and says so.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"fenecdb.dev/go/fenecdb"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv("FENECDB_URL") == "" && flag.Lookup("test.run").Value.String() != "^TestConformance$" {
		fmt.Println("SKIP go examples that need a server (ExampleClient_*, ExampleWorker): FENECDB_URL is not set")
		skip := "^(ExampleClient_|ExampleWorker)"
		if prev := flag.Lookup("test.skip").Value.String(); prev != "" {
			skip = prev + "|" + skip
		}
		_ = flag.Set("test.skip", skip)
	}
	if os.Getenv("FENECDB_REPLICA_URL") == "" && flag.Lookup("test.run").Value.String() != "^TestConformance$" {
		fmt.Println("SKIP go example of a primary and its replica (ExampleWithReadFrom): FENECDB_REPLICA_URL is not set")
		skip := "^ExampleWithReadFrom$"
		if prev := flag.Lookup("test.skip").Value.String(); prev != "" {
			skip = prev + "|" + skip
		}
		_ = flag.Set("test.skip", skip)
	}
	os.Exit(m.Run())
}

// A client with every option: a compiled example (it sends nothing).
func ExampleNew() {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}} // leave hc.Timeout at 0
	db := fenecdb.New("http://127.0.0.1:8080",
		fenecdb.WithToken(os.Getenv("FENEC_TOKEN")), // Authorization: Bearer <token>
		fenecdb.WithTimeout(30*time.Second),         // per request; the default; 0 for none
		fenecdb.WithHTTPClient(hc))                  // optional
	_ = db
}

// A primary and its replica: the client given the replica first finds the primary by itself (the
// replica's 403 names it), and reads its own writes from the replica.
func ExampleWithReadFrom() {
	ctx := context.Background()
	primary, replica := os.Getenv("FENECDB_PRIMARY_URL"), os.Getenv("FENECDB_REPLICA_URL")
	db := fenecdb.New(replica, fenecdb.WithServers(primary), fenecdb.WithReadFrom(fenecdb.Replica))
	_, _ = db.Exec(ctx, "drop collection notes") // writes go to the primary, whichever server is named first
	if _, err := db.Exec(ctx, "create collection notes (text text)"); err != nil {
		log.Fatal(err)
	}
	if _, err := db.From("notes").Insert(ctx, fenecdb.D("id", 1, "text", "hello")); err != nil {
		log.Fatal(err)
	}
	fmt.Println(db.URL() == primary)
	// a read goes to the replica with Fenec-After: db.Seq(), so it waits there for the put above
	row, err := db.From("notes").Where("id", "=", 1).First(ctx)
	fmt.Println(row["text"], err)
	// Output:
	// true
	// hello <nil>
}

// The claim of a worker, written by the builder: values are parameters, names are checked.
func Example() {
	text, params, err := fenecdb.From("mail").
		WhereCond(fenecdb.Raw("run_at <= now()")).
		Order("run_at", "asc").
		Limit(5).
		ToUpdate(fenecdb.D("owner", "w9:17", "run_at", fenecdb.Expr("now() + ?", 60000), "attempts", fenecdb.Inc(1)),
			fenecdb.Returning("id", "payload"))
	fmt.Println(text)
	fmt.Println(params, err)

	_, _, err = fenecdb.From("mail").Order("id", "asc").ToDelete()
	var refused *fenecdb.QueryError
	fmt.Println(errors.As(err, &refused), refused.Message)
	// Output:
	// set mail {owner: $1, run_at: now() + $2, attempts: coalesce(attempts, 0) + $3} where run_at <= now() order run_at asc limit 5 returning id, payload
	// [w9:17 60000 1] <nil>
	// true an unfiltered delete covers the whole collection; if you mean it, delete({ all: true })
}

// A queue by hand: enqueue, a claim held at the server, ack, fail with back-off, and a stale ack.
func ExampleClient_Wait() {
	ctx := context.Background()
	db := fenecdb.New(os.Getenv("FENECDB_URL"), fenecdb.WithTimeout(10*time.Second))
	if _, err := db.Exec(ctx, "create collection mail (payload json, run_at timestamp @sorted, owner text, attempts int, error text)"); err != nil {
		fmt.Println(err)
		return
	}
	defer db.Exec(ctx, "drop collection mail")
	mail := db.From("mail")

	for _, to := range []string{"ada@example.com", "bo@example.com"} {
		_, err := mail.Insert(ctx, fenecdb.D("payload", fenecdb.D("to", to), "run_at", fenecdb.Expr("now()"), "attempts", 0))
		if err != nil {
			fmt.Println(err)
			return
		}
	}

	// held at the server for up to 20 s while no job is ready; cancelling ctx gives it up
	tag := "w1:1"
	waiting := db.Wait(20 * time.Second)
	res, err := waiting.From("mail").WhereCond(fenecdb.Raw("run_at <= now()")).Order("run_at", "asc").Limit(5).
		Update(ctx, fenecdb.D("owner", tag, "run_at", fenecdb.Expr("now() + ?", 60000), "attempts", fenecdb.Inc(1)),
			fenecdb.Returning("id", "payload"))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, t := range res.Rows {
		fmt.Println("claimed", t["payload"].(map[string]any)["to"])
	}
	ada, bo := res.Rows[0]["id"], res.Rows[1]["id"]

	// ack: the row goes, if it is still ours
	_, err = db.From("mail").Where("id", "=", ada).Where("owner", "=", tag).Delete(ctx, fenecdb.Require(1))
	fmt.Println("ack:", err)

	// fail: back in 1 s × attempts², dead (run_at null) after the fifth attempt
	_, err = db.From("mail").Where("id", "=", bo).Where("owner", "=", tag).
		Update(ctx, fenecdb.D("owner", nil, "error", "smtp timeout",
			"run_at", fenecdb.Expr("case when attempts >= ? then null else now() + ? * attempts * attempts end", 5, 1000)),
			fenecdb.Require(1))
	fmt.Println("fail:", err)

	// a second ack of the same job is refused: 412, and nothing is deleted
	_, err = db.From("mail").Where("id", "=", ada).Where("owner", "=", tag).Delete(ctx, fenecdb.Require(1))
	var refused *fenecdb.Error
	if errors.As(err, &refused) {
		fmt.Println("again:", refused.Status, refused.Code)
	}
	// Output:
	// claimed ada@example.com
	// claimed bo@example.com
	// ack: <nil>
	// fail: <nil>
	// again: 412 unmet
}

// The seed page's worker loop, by the helper: a held claim of ten jobs, four run at a time with their
// leases kept alive, each acked or failed with back-off; Ctrl-C or SIGTERM stops it gracefully.
func ExampleWorker() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	db := fenecdb.New(os.Getenv("FENECDB_URL"))
	if _, err := db.Exec(ctx, "create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, error text)"); err != nil {
		fmt.Println(err)
		return
	}
	defer db.Exec(context.Background(), "drop collection jobs")

	w := &fenecdb.Worker{
		DB:          db,
		Queue:       "jobs",
		Batch:       10,               // jobs per claim
		Concurrency: 4,                // of them run at once
		Lease:       30 * time.Second, // extended every 10 s while a job is in hand
		Wait:        30 * time.Second, // a claim is held at the server until a job is ready
		MaxAttempts: 5,                // failed a fifth time, a job is a dead letter
		OnEvent: func(e fenecdb.Event) {
			if e.Type == "retry" { // the server is away: Run pauses and tries again
				log.Printf("fenecdb: %s failed: %s; again in %s", e.Call, e.Error, e.Delay)
			}
		},
	}
	for _, to := range []string{"ada@example.com", "bo@example.com", "cy@example.com"} {
		if _, err := w.Enqueue(ctx, fenecdb.D("to", to), 0); err != nil {
			fmt.Println(err)
			return
		}
	}

	var mu sync.Mutex
	var sent []string
	send := func(ctx context.Context, j fenecdb.Job) error {
		to := j.Payload.(map[string]any)["to"].(string)
		// the work: an error or a panic fails the job, to come back after attempts² seconds
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, to)
		if len(sent) == 3 {
			stop() // the demo ends once every job ran; a real worker runs until a signal
		}
		return nil
	}
	if err := w.Run(ctx, send); err != nil { // returns once stopped, its jobs finished or given back
		fmt.Println(err)
	}

	sort.Strings(sent)
	left, err := db.From("jobs").Count(context.Background())
	fmt.Println(sent, left, err)
	// Output:
	// [ada@example.com bo@example.com cy@example.com] 0 <nil>
}

// A claim retried under the same Idempotency-Key is answered the jobs the first try took, and takes none.
func ExampleClient_IdempotencyKey() {
	ctx := context.Background()
	db := fenecdb.New(os.Getenv("FENECDB_URL"))
	if _, err := db.Exec(ctx, "create collection tasks (payload json, run_at timestamp @sorted, owner text, attempts int, error text)"); err != nil {
		fmt.Println(err)
		return
	}
	defer db.Exec(ctx, "drop collection tasks")
	_, err := db.Batch(ctx,
		fenecdb.Stmt("put tasks {payload: $1, run_at: now(), attempts: 0}", "first"),
		fenecdb.Stmt("put tasks {payload: $1, run_at: now(), attempts: 0}", "second"))
	if err != nil {
		fmt.Println(err)
		return
	}

	// one key per claim, kept for its retries
	keyed := db.IdempotencyKey(fmt.Sprintf("claim-w1-%d", time.Now().UnixNano()))
	claim := keyed.From("tasks").WhereCond(fenecdb.Raw("run_at <= now()")).Order("run_at", "asc").Limit(1)
	patch := fenecdb.D("owner", "w1:0001", "run_at", fenecdb.Expr("now() + ?", 30000), "attempts", fenecdb.Inc(1))
	for try := 1; try <= 2; try++ {
		res, err := claim.Update(ctx, patch, fenecdb.Returning("payload"))
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(try, res.Rows[0]["payload"], res.Replayed)
	}
	ready, _ := db.From("tasks").Where("owner", "=", nil).Count(ctx)
	fmt.Println("still ready:", ready)
	// Output:
	// 1 first false
	// 2 first true
	// still ready: 1
}
