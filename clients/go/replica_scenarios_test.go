package fenecdb

// The shared suite's replica cases (FENEC_REPLICA_SCENARIOS, conformance/replica-scenarios.json),
// played against the primary at FENEC_PRIMARY_URL and its replica at FENEC_REPLICA_URL that
// conformance/run.py starts. Each case is played by its name; a case this runner has no player for
// fails, so that a case added to the file is never passed by being skipped.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// replicaCase is one case of the file; only its name (and an optional collection) is read here.
type replicaCase struct {
	Name       string `json:"name"`
	Collection string `json:"collection"`
	TimeoutMS  int64  `json:"timeout_ms"`
}

var replicaPlayers = map[string]func(ctx context.Context, primary, replica, q string) string{
	"replica: writes given only a replica reach the primary":   playWritesThroughReplica,
	"replica: a worker given only a replica works the primary": playWorkerThroughReplica,
	"replica: reads where told read their own writes":          playReadsOnReplica,
}

// runReplicaScenariosFile plays every case of path, printing a line per case and the part's tally.
func runReplicaScenariosFile(out io.Writer, path, primary, replica string) scenarioTally {
	var t scenarioTally
	var cases []replicaCase
	data, err := os.ReadFile(path)
	if err == nil {
		var file struct {
			Scenarios []replicaCase `json:"scenarios"`
		}
		if err = json.Unmarshal(data, &file); err != nil || file.Scenarios == nil {
			err = json.Unmarshal(data, &cases) // a bare list of cases
		} else {
			cases = file.Scenarios
		}
	}
	if err == nil && len(cases) == 0 {
		err = fmt.Errorf("no case")
	}
	if err == nil && (primary == "" || replica == "") {
		err = fmt.Errorf("FENEC_PRIMARY_URL and FENEC_REPLICA_URL are needed")
	}
	if err != nil {
		fmt.Fprintf(out, "FAIL %s: a replica scenarios file / %v\n", path, err)
		t.fail++
		return t
	}
	primary, replica = strings.TrimRight(primary, "/"), strings.TrimRight(replica, "/")
	only := os.Getenv("FENEC_ONLY")
	for _, c := range cases {
		if only != "" && !strings.Contains(c.Name, only) {
			continue
		}
		play, ok := replicaPlayers[c.Name]
		problem := "the Go runner has no player for this case"
		if ok {
			timeout := time.Duration(c.TimeoutMS) * time.Millisecond
			if timeout <= 0 {
				timeout = 60 * time.Second
			}
			q := c.Collection
			if q == "" {
				q = "replica_go_" + randomHex()
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			problem = play(ctx, primary, replica, q)
			cancel()
		}
		if problem != "" {
			fmt.Fprintf(out, "FAIL %s: %s\n", c.Name, problem)
			t.fail++
		} else {
			fmt.Fprintf(out, "ok %s\n", c.Name)
			t.ok++
		}
	}
	fmt.Fprintf(out, "replica scenarios %s: %d ok, %d FAIL\n", path, t.ok, t.fail)
	return t
}

// freshQueue drops q (a 404 is fine) and creates it as a queue, through db.
func freshQueue(ctx context.Context, db *Client, q string) error {
	_, err := db.Exec(ctx, "drop collection "+q)
	var e *Error
	if err != nil && !(errors.As(err, &e) && e.Code == CodeNotFound) {
		return err
	}
	_, err = db.Exec(ctx, strings.ReplaceAll(defaultSchema, "{q}", q))
	return err
}

// rawCount counts q's rows at one server alone (after > 0: with Fenec-After), outside the client.
func rawCount(ctx context.Context, url, q string, after int64) (int64, error) {
	body, _ := json.Marshal(map[string]any{"query": "get " + q + " count", "params": []any{}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/query", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if after > 0 {
		req.Header.Set("Fenec-After", strconv.FormatInt(after, 10))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var rows []struct {
		Count int64 `json:"count"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(data, &rows) != nil || len(rows) != 1 {
		return 0, fmt.Errorf("a count at %s answered %d %.200s", url, resp.StatusCode, data)
	}
	return rows[0].Count, nil
}

var heldGauge = regexp.MustCompile(`(?m)^fenec_held_requests(?:\{[^}]*\})? (\S+)$`)

// heldAt reads the held-request gauge of the server at url.
func heldAt(ctx context.Context, url string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/_metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	m := heldGauge.FindSubmatch(data)
	if m == nil {
		return 0, fmt.Errorf("%s/_metrics has no fenec_held_requests", url)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// untilHolds polls cond every 20 ms until it holds (""), or answers its last problem once ctx ends.
func untilHolds(ctx context.Context, cond func() string) string {
	for {
		problem := cond()
		if problem == "" {
			return ""
		}
		select {
		case <-ctx.Done():
			return problem
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// playWritesThroughReplica: a client given the replica alone creates the queue and enqueues 5 jobs; the
// primary holds 5 rows, and so does the replica once it holds the last write (Fenec-After).
func playWritesThroughReplica(ctx context.Context, primary, replica, q string) string {
	db := New(replica)
	if err := freshQueue(ctx, db, q); err != nil {
		return "create: " + err.Error()
	}
	defer func() { _, _ = New(primary).Exec(context.Background(), "drop collection "+q) }()
	w := &Worker{DB: db, Queue: q}
	var last Result
	for i := 0; i < 5; i++ {
		res, err := w.Enqueue(ctx, D("n", i), 0)
		if err != nil {
			return "enqueue: " + err.Error()
		}
		last = res
	}
	if db.Primary() != primary {
		return fmt.Sprintf("primary: %s / %s", primary, db.Primary())
	}
	if n, err := rawCount(ctx, primary, q, 0); err != nil || n != 5 {
		return fmt.Sprintf("rows on the primary: 5 / %d %v", n, err)
	}
	if last.Seq <= 0 {
		return fmt.Sprintf("the last write's Fenec-Seq: a number / %d", last.Seq)
	}
	if n, err := rawCount(ctx, replica, q, last.Seq); err != nil || n != 5 {
		return fmt.Sprintf("rows on the replica after seq %d: 5 / %d %v", last.Seq, n, err)
	}
	return ""
}

// playWorkerThroughReplica: a worker given the replica alone works the primary's jobs, is held there
// when the queue is empty and takes a job put meanwhile; the replica never holds a claim; the worker
// tells the primary in a primary event.
func playWorkerThroughReplica(ctx context.Context, primary, replica, q string) string {
	pdb := New(primary)
	if err := freshQueue(ctx, pdb, q); err != nil {
		return "create: " + err.Error()
	}
	defer func() { _, _ = pdb.Exec(context.Background(), "drop collection "+q) }()
	producer := &Worker{DB: pdb, Queue: q}
	for i := 0; i < 5; i++ {
		if _, err := producer.Enqueue(ctx, D("n", i), 0); err != nil {
			return "enqueue: " + err.Error()
		}
	}
	// as after the first case: the replica holds the queue (a held claim on a collection a replica does
	// not hold yet is answered 404 there, not 403)
	if n, err := rawCount(ctx, replica, q, pdb.Seq()); err != nil || n != 5 {
		return fmt.Sprintf("rows on the replica: 5 / %d %v", n, err)
	}
	var log eventLog
	var processed atomic.Int64
	w := &Worker{DB: New(replica), Queue: q, Concurrency: 1, Wait: 30 * time.Second, OnEvent: log.add}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- w.Run(runCtx, func(context.Context, Job) error { processed.Add(1); return nil })
	}()
	replicaHeld := func() string {
		if n, err := heldAt(ctx, replica); err != nil || n != 0 {
			return fmt.Sprintf("held claims on the replica: 0 / %v %v", n, err)
		}
		return ""
	}
	steps := []func() string{
		func() string {
			if n, err := rawCount(ctx, primary, q, 0); processed.Load() < 5 || err != nil || n != 0 {
				return fmt.Sprintf("5 jobs processed and acked / %d processed, %d rows left %v", processed.Load(), n, err)
			}
			return ""
		},
		replicaHeld,
		func() string {
			if n, err := heldAt(ctx, primary); err != nil || n < 1 {
				return fmt.Sprintf("the worker's claim held on the primary / %v %v", n, err)
			}
			return ""
		},
		replicaHeld,
		func() string {
			if _, err := producer.Enqueue(ctx, D("n", 5), 0); err != nil {
				return "enqueue: " + err.Error()
			}
			return ""
		},
		func() string {
			if processed.Load() < 6 {
				return fmt.Sprintf("the job put while held processed / %d of 6", processed.Load())
			}
			return ""
		},
		replicaHeld,
	}
	for _, step := range steps {
		if problem := untilHolds(ctx, step); problem != "" {
			select {
			case err := <-done:
				return fmt.Sprintf("%s (run returned %v)", problem, err)
			default:
				return problem
			}
		}
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			return "run: " + err.Error()
		}
	case <-ctx.Done():
		return "run: returned after its stop / not returned"
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, e := range log.events {
		if e.Type == evPrimary && e.URL == primary {
			return ""
		}
	}
	return "a primary event with " + primary + " / none"
}

// playReadsOnReplica: a client given both servers, reading from the replica, puts a row and reads it
// back by id 20 times, each read answered with the row just written.
func playReadsOnReplica(ctx context.Context, primary, replica, q string) string {
	db := New(primary, WithServers(replica), WithReadFrom(Replica))
	if err := freshQueue(ctx, db, q); err != nil {
		return "create: " + err.Error()
	}
	defer func() { _, _ = db.Exec(context.Background(), "drop collection "+q) }()
	for i := int64(1); i <= 20; i++ {
		if _, err := db.From(q).Insert(ctx, D("id", i, "payload", D("round", i))); err != nil {
			return fmt.Sprintf("round %d: put: %v", i, err)
		}
		row, err := db.From(q).Where("id", "=", i).First(ctx)
		if err != nil || row == nil || fmt.Sprint(row["payload"]) != fmt.Sprint(map[string]any{"round": i}) {
			return fmt.Sprintf("round %d: the row just written / %v %v", i, row, err)
		}
	}
	return ""
}

// TestLiveReplicaCases plays the shared replica cases against the primary and replica test.sh starts
// (FENEC_TEST_PRIMARY_URL, FENEC_TEST_REPLICA_URL).
func TestLiveReplicaCases(t *testing.T) {
	primary, replica := os.Getenv("FENEC_TEST_PRIMARY_URL"), os.Getenv("FENEC_TEST_REPLICA_URL")
	if primary == "" || replica == "" {
		t.Skip("FENEC_TEST_PRIMARY_URL and FENEC_TEST_REPLICA_URL are not set (test.sh sets them)")
	}
	for name, play := range replicaPlayers {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if problem := play(ctx, primary, replica, "replica_live_"+randomHex()); problem != "" {
			t.Errorf("%s: %s", name, problem)
		}
		cancel()
	}
}
