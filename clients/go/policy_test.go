package fenecdb

// The worker under the docs' own policy (conformance/worker-policy.json; conformance/README.md, "The
// worker under the docs' policy"): the real Worker, with a worker token, against the server at
// FENEC_POLICY_URL that conformance/run.py started with that policy. One case, counted in the summary.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

const policyCase = "worker under the docs' policy"

type policySpec struct {
	Schema string                    `json:"schema"`
	Tokens map[string]map[string]any `json:"tokens"`
	Worker struct {
		Name           string `json:"name"`
		Batch          int64  `json:"batch"`
		Concurrency    int    `json:"concurrency"`
		LeaseMS        int64  `json:"lease_ms"`
		WaitMS         int64  `json:"wait_ms"`
		MaxAttempts    int64  `json:"max_attempts"`
		BackoffMS      int64  `json:"backoff_ms"`
		DrainTimeoutMS int64  `json:"drain_timeout_ms"`
	} `json:"worker"`
	Jobs []struct {
		Key       string `json:"key"`
		Behaviour string `json:"behaviour"`
		HoldMS    int64  `json:"hold_ms"`
		Attempts  int64  `json:"attempts"`
		By        string `json:"by"`
		Expect    struct {
			Fate     string `json:"fate"`
			Starts   int    `json:"starts"`
			Error    string `json:"error"`
			Attempts int64  `json:"attempts"`
		} `json:"expect"`
	} `json:"jobs"`
	Stop struct {
		Jobs   int `json:"jobs"`
		Expect struct {
			Acked        int `json:"acked"`
			GivenBack    int `json:"given_back"`
			GivenBackRow struct {
				Attempts int64 `json:"attempts"`
			} `json:"given_back_row"`
		} `json:"expect"`
	} `json:"stop"`
}

// runPolicyFile plays the case and answers (passed, failed); without FENEC_POLICY_URL it is skipped, or
// failed when require.
func runPolicyFile(out io.Writer, require bool) (int, int) {
	if !picked(policyCase) {
		return 0, 0
	}
	url := strings.TrimRight(os.Getenv("FENEC_POLICY_URL"), "/")
	if url == "" {
		if require {
			fmt.Fprintf(out, "FAIL %s: FENEC_REQUIRE_SERVER=1 but FENEC_POLICY_URL is not set\n", policyCase)
			return 0, 1
		}
		fmt.Fprintf(out, "skipped %s: FENEC_POLICY_URL not set\n", policyCase)
		return 0, 0
	}
	path, _ := fileFromEnv("FENEC_POLICY_SCENARIO", "worker-policy.json")
	err := func() error {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var spec policySpec
		if err := json.Unmarshal(data, &spec); err != nil {
			return err
		}
		var tokens map[string]string
		if err := json.Unmarshal([]byte(os.Getenv("FENEC_POLICY_TOKENS")), &tokens); err != nil {
			return fmt.Errorf("FENEC_POLICY_TOKENS: %w", err)
		}
		return playPolicy(spec, url, tokens, os.Getenv("FENEC_POLICY_ROOT_TOKEN"))
	}()
	if err != nil {
		fmt.Fprintf(out, "FAIL %s: %v\n", policyCase, err)
		return 0, 1
	}
	fmt.Fprintf(out, "ok %s\n", policyCase)
	return 1, 0
}

// until waits up to 60 s for done; conditions are waited for, never assumed from a sleep.
func until(what string, done func() bool) error {
	end := time.Now().Add(60 * time.Second)
	for !done() {
		if time.Now().After(end) {
			return fmt.Errorf("not within 60 s: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

func playPolicy(spec policySpec, url string, tokens map[string]string, root string) error {
	ctx := context.Background()
	as := func(token string) *Client { return New(url, WithToken(token), WithTimeout(30*time.Second)) }
	admin, producer, mine, other := as(root), as(tokens["producer"]), as(tokens["worker"]), as(tokens["other"])
	var e *Error
	if _, err := admin.Exec(ctx, "drop collection jobs"); err != nil && !(errors.As(err, &e) && e.Code == CodeNotFound) {
		return err // a 404 is fine: each SDK's runner starts from a fresh queue
	}
	if _, err := admin.Exec(ctx, spec.Schema); err != nil {
		return err
	}
	var mu sync.Mutex
	var events []Event
	starts := map[string]int{}
	ws := spec.Worker
	ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
	worker := &Worker{DB: mine, Queue: "jobs", Name: ws.Name, Batch: ws.Batch, Concurrency: ws.Concurrency,
		Lease: ms(ws.LeaseMS), Wait: ms(ws.WaitMS), MaxAttempts: ws.MaxAttempts, DrainTimeout: ms(ws.DrainTimeoutMS),
		Backoff: func(int64) time.Duration { return ms(ws.BackoffMS) },
		OnEvent: func(e Event) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}}
	enqueuer := &Worker{DB: producer, Queue: "jobs"} // a producer's token enqueues; it never runs
	byKey := map[string]int{}
	for i, j := range spec.Jobs {
		byKey[j.Key] = i
		if j.By == "server token" {
			_, err := admin.Exec(ctx, "put jobs {queue: $1, payload: $2, run_at: now(), attempts: $3}",
				spec.Tokens["worker"]["queue"], D("key", j.Key), j.Attempts)
			if err != nil {
				return err
			}
			continue
		}
		if res, err := enqueuer.Enqueue(ctx, D("key", j.Key), 0); err != nil || res.Affected != 1 {
			return fmt.Errorf("enqueue %s: %v, %+v", j.Key, err, res)
		}
	}
	stopping := make(chan struct{})
	handle := func(hctx context.Context, j Job) error {
		key, _ := j.Payload.(map[string]any)["key"].(string)
		mu.Lock()
		starts[key]++
		mu.Unlock()
		kind := "ok" // the left job, acked by the worker once the other queue's token was refused
		if i, ok := byKey[key]; ok {
			kind = spec.Jobs[i].Behaviour
		} else if strings.HasPrefix(key, "block") {
			kind = "block"
		}
		switch {
		case kind == "fail-always" || (kind == "fail-once" && j.Attempts == 1):
			return errors.New(key)
		case kind == "slow": // past the lease: only the heartbeat keeps it
			select {
			case <-time.After(ms(spec.Jobs[byKey[key]].HoldMS)):
			case <-hctx.Done():
				return hctx.Err()
			}
		case kind == "block":
			select {
			case <-stopping:
			case <-time.After(60 * time.Second):
			}
		}
		return nil
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- worker.Run(runCtx, handle) }()
	var runErr error
	ended := func() bool {
		select {
		case runErr = <-ran:
			return true
		default:
			return false
		}
	}
	rows := func() map[string]Row {
		got, err := admin.Query(ctx, "get jobs")
		if err != nil {
			return nil
		}
		byPayload := map[string]Row{}
		for _, r := range got {
			key, _ := r["payload"].(map[string]any)["key"].(string)
			byPayload[key] = r
		}
		return byPayload
	}
	settled := func() bool {
		now := rows()
		if now == nil {
			return false
		}
		for _, j := range spec.Jobs {
			r, present := now[j.Key]
			if (j.Expect.Fate == "acked" && present) || (j.Expect.Fate == "dead" && (!present || r["run_at"] != nil)) {
				return false
			}
		}
		return true
	}
	var gone bool
	if err := until("every job settled", func() bool { gone = ended(); return gone || settled() }); err != nil {
		return err
	}
	if gone {
		return fmt.Errorf("Run ended: %v", runErr)
	}
	now := rows()
	mu.Lock()
	for _, j := range spec.Jobs {
		if starts[j.Key] != j.Expect.Starts {
			mu.Unlock()
			return fmt.Errorf("%s: started %d times, expected %d", j.Key, starts[j.Key], j.Expect.Starts)
		}
		if r := now[j.Key]; j.Expect.Fate == "dead" && (r["error"] != j.Expect.Error || r["attempts"] != j.Expect.Attempts || r["owner"] != nil) {
			mu.Unlock()
			return fmt.Errorf("%s: the dead letter is %v", j.Key, r)
		}
	}
	mu.Unlock()

	// the other queue's token: a ready mail job is not there for it
	if _, err := enqueuer.Enqueue(ctx, D("key", "left"), 0); err != nil {
		return err
	}
	left := rows()["left"]
	foreign := &Worker{DB: other, Queue: "jobs", Wait: -1}
	if jobs, err := foreign.Claim(ctx); err != nil || len(jobs) != 0 {
		return fmt.Errorf("a worker of another queue claimed %v (%v)", jobs, err)
	}
	owner, _ := left["owner"].(string)
	if owner == "" {
		owner = ws.Name + ":1"
	}
	j := Job{ID: left["id"], Owner: owner}
	if err := foreign.Extend(ctx, j); !IsStale(err) {
		return fmt.Errorf("a worker of another queue extended a mail job: %v", err)
	}
	if err := foreign.Ack(ctx, j); !IsStale(err) {
		return fmt.Errorf("a worker of another queue acked a mail job: %v", err)
	}
	if err := until("the left job acked", func() bool { _, there := rows()["left"]; return !there || ended() }); err != nil {
		return err
	}
	if runErr != nil {
		return fmt.Errorf("Run ended: %v", runErr)
	}

	// the stop: two block jobs run, the third is given back; one put, so that one claim takes them all
	var blocks []any
	for n := 0; n < spec.Stop.Jobs; n++ {
		blocks = append(blocks, D("payload", D("key", fmt.Sprintf("block-%d", n)), "run_at", 0, "attempts", 0))
	}
	if _, err := producer.Exec(ctx, "put jobs $1", blocks); err != nil {
		return err
	}
	running := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for k, v := range starts {
			if strings.HasPrefix(k, "block") {
				n += v
			}
		}
		return n
	}
	if err := until("two block jobs running", func() bool { return running() == 2 }); err != nil {
		return err
	}
	stop()
	close(stopping)
	select {
	case runErr = <-ran:
		if runErr != nil {
			return fmt.Errorf("Run: %v", runErr)
		}
	case <-time.After(60 * time.Second):
		return errors.New("Run did not return within 60 s of the stop")
	}
	var back []Row
	for k, r := range rows() {
		if strings.HasPrefix(k, "block") {
			back = append(back, r)
		}
	}
	exp := spec.Stop.Expect
	if len(back) != exp.GivenBack {
		return fmt.Errorf("after the stop, block jobs left: %v", back)
	}
	for _, r := range back {
		if r["owner"] != nil || r["attempts"] != exp.GivenBackRow.Attempts || r["run_at"] == nil {
			return fmt.Errorf("a job given back is %v", r)
		}
	}
	c, err := readContract()
	if err != nil {
		return err
	}
	types := map[string]int{}
	for _, e := range events {
		types[e.Type]++
	}
	if types["released"] != exp.GivenBack || types["lost"] != 0 || types["stopped"] != 1 {
		return fmt.Errorf("events %v", types)
	}
	if problems := eventFieldProblems(c, events); len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	known := c.Events.TypeNames["go"]
	for kind := range types {
		if !slices.ContainsFunc(eventTypes, func(s string) bool { return s == kind }) || !mapHasValue(known, kind) {
			return fmt.Errorf("an event type outside the contract: %s", kind)
		}
	}
	return nil
}

func mapHasValue(m map[string]string, v string) bool {
	for _, x := range m {
		if x == v {
			return true
		}
	}
	return false
}
