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
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// replicaFile is replica-scenarios.json: the cases and what they share.
type replicaFile struct {
	Schema     string        `json:"schema"`
	HeldGauge  string        `json:"held_gauge"`
	DeadlineMS int64         `json:"deadline_ms"`
	Cases      []replicaCase `json:"cases"`
}

// replicaCase is one case: its name picks its player, which reads the numbers it needs (0: its own).
type replicaCase struct {
	Name       string `json:"name"`
	Collection string `json:"collection"`
	Jobs       int    `json:"jobs"`
	Later      int    `json:"later"`
	Rounds     int    `json:"rounds"`
	Worker     struct {
		Concurrency int   `json:"concurrency"`
		Batch       int64 `json:"batch"`
		WaitMS      int64 `json:"wait_ms"`
		LeaseMS     int64 `json:"lease_ms"`
	} `json:"worker"`

	schema, gauge string // the file's
}

func (c replicaCase) or(n, def int) int {
	if n <= 0 {
		return def
	}
	return n
}

var replicaPlayers = map[string]func(ctx context.Context, c replicaCase, primary, replica, q string) string{
	"replica: writes given only a replica reach the primary":   playWritesThroughReplica,
	"replica: a worker given only a replica works the primary": playWorkerThroughReplica,
	"replica: reads where told read their own writes":          playReadsOnReplica,
}

// runReplicaScenariosFile plays every case of path, printing a line per case and the part's tally.
func runReplicaScenariosFile(out io.Writer, path, primary, replica string) scenarioTally {
	var t scenarioTally
	var file replicaFile
	data, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(data, &file)
	}
	if err == nil && len(file.Cases) == 0 {
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
	if file.Schema == "" {
		file.Schema = defaultSchema
	}
	if file.HeldGauge == "" {
		file.HeldGauge = "fenec_held_claims"
	}
	timeout := time.Duration(file.DeadlineMS) * time.Millisecond
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	primary, replica = strings.TrimRight(primary, "/"), strings.TrimRight(replica, "/")
	for _, c := range file.Cases {
		if !picked(c.Name) {
			continue
		}
		play, ok := replicaPlayers[c.Name]
		problem := "the Go runner has no player for this case"
		if ok {
			q := c.Collection
			if q == "" {
				q = "replica_go_" + randomHex()
			}
			c.schema, c.gauge = file.Schema, file.HeldGauge
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			problem = play(ctx, c, primary, replica, q)
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

// freshQueue drops q (a 404 is fine) and creates it with schema ({q} its name), through db.
func freshQueue(ctx context.Context, db *Client, schema, q string) error {
	_, err := db.Exec(ctx, "drop collection "+q)
	var e *Error
	if err != nil && !(errors.As(err, &e) && e.Code == CodeNotFound) {
		return err
	}
	_, err = db.Exec(ctx, strings.ReplaceAll(schema, "{q}", q))
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

// heldAt reads the held-claim gauge (its name: gauge) of the server at url.
func heldAt(ctx context.Context, url, gauge string) (float64, error) {
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
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(gauge) + `(?:\{[^}]*\})? (\S+)$`).FindSubmatch(data)
	if m == nil {
		return 0, fmt.Errorf("%s/_metrics has no %s", url, gauge)
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

// playWritesThroughReplica: a client given the replica alone creates the queue and enqueues its jobs
// (5); the primary holds them, and so does the replica once it holds the last write (Fenec-After). The
// collection is left for the next case, as the file says.
func playWritesThroughReplica(ctx context.Context, c replicaCase, primary, replica, q string) string {
	db := New(replica)
	if err := freshQueue(ctx, db, c.schema, q); err != nil {
		return "create: " + err.Error()
	}
	jobs := c.or(c.Jobs, 5)
	w := &Worker{DB: db, Queue: q}
	var last Result
	for i := 0; i < jobs; i++ {
		res, err := w.Enqueue(ctx, D("n", i), 0)
		if err != nil {
			return "enqueue: " + err.Error()
		}
		last = res
	}
	if db.URL() != primary {
		return fmt.Sprintf("primary: %s / %s", primary, db.URL())
	}
	if n, err := rawCount(ctx, primary, q, 0); err != nil || n != int64(jobs) {
		return fmt.Sprintf("rows on the primary: %d / %d %v", jobs, n, err)
	}
	if last.Seq <= 0 {
		return fmt.Sprintf("the last write's Fenec-Seq: a number / %d", last.Seq)
	}
	if n, err := rawCount(ctx, replica, q, last.Seq); err != nil || n != int64(jobs) {
		return fmt.Sprintf("rows on the replica after seq %d: %d / %d %v", last.Seq, jobs, n, err)
	}
	return ""
}

// playWorkerThroughReplica: a worker given the replica alone works the primary's jobs, is held there
// when the queue is empty and takes a job put meanwhile; the replica never holds a claim; the worker
// tells the primary in a primary event.
func playWorkerThroughReplica(ctx context.Context, c replicaCase, primary, replica, q string) string {
	pdb := New(primary)
	defer func() { _, _ = pdb.Exec(context.Background(), "drop collection "+q) }()
	jobs, later := int64(c.or(c.Jobs, 5)), int64(c.or(c.Later, 1))
	producer := &Worker{DB: pdb, Queue: q}
	// the first case's jobs; made here when it did not run (FENEC_ONLY) or left other than it should
	if n, err := rawCount(ctx, primary, q, 0); err != nil || n != jobs {
		if err := freshQueue(ctx, pdb, c.schema, q); err != nil {
			return "create: " + err.Error()
		}
		for i := int64(0); i < jobs; i++ {
			if _, err := producer.Enqueue(ctx, D("n", i), 0); err != nil {
				return "enqueue: " + err.Error()
			}
		}
	}
	// the replica holds the queue, as after the first case (a held claim on a collection a replica does
	// not hold yet is answered 404 there, not 403)
	if n, err := rawCount(ctx, replica, q, pdb.Seq()); err != nil || n != jobs {
		return fmt.Sprintf("rows on the replica: %d / %d %v", jobs, n, err)
	}
	var log eventLog
	var processed atomic.Int64
	w := &Worker{DB: New(replica), Queue: q, Concurrency: c.or(c.Worker.Concurrency, 1), Batch: c.Worker.Batch,
		Wait:  time.Duration(c.or(int(c.Worker.WaitMS), 30000)) * time.Millisecond,
		Lease: time.Duration(c.Worker.LeaseMS) * time.Millisecond, OnEvent: log.add}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- w.Run(runCtx, func(context.Context, Job) error { processed.Add(1); return nil })
	}()
	replicaHeld := func() string {
		if n, err := heldAt(ctx, replica, c.gauge); err != nil || n != 0 {
			return fmt.Sprintf("held claims on the replica: 0 / %v %v", n, err)
		}
		return ""
	}
	steps := []func() string{
		func() string {
			if n, err := rawCount(ctx, primary, q, 0); processed.Load() < jobs || err != nil || n != 0 {
				return fmt.Sprintf("%d jobs processed and acked / %d processed, %d rows left %v", jobs, processed.Load(), n, err)
			}
			return ""
		},
		replicaHeld,
		func() string {
			if n, err := heldAt(ctx, primary, c.gauge); err != nil || n < 1 {
				return fmt.Sprintf("the worker's claim held on the primary / %v %v", n, err)
			}
			return ""
		},
		replicaHeld,
		func() string {
			for i := int64(0); i < later; i++ {
				if _, err := producer.Enqueue(ctx, D("n", jobs+i), 0); err != nil {
					return "enqueue: " + err.Error()
				}
			}
			return ""
		},
		func() string {
			if n, err := rawCount(ctx, primary, q, 0); processed.Load() < jobs+later || err != nil || n != 0 {
				return fmt.Sprintf("the jobs put while held processed / %d of %d, %d rows left %v", processed.Load(),
					jobs+later, n, err)
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

// playReadsOnReplica: a client given both servers, reading from the replica, writes row 1 over with the
// builder and reads it back by id, 20 rounds, each read answered with the round just written.
func playReadsOnReplica(ctx context.Context, c replicaCase, primary, replica, q string) string {
	db := New(primary, WithServers(replica), WithReadFrom(Replica))
	if err := freshQueue(ctx, db, c.schema, q); err != nil {
		return "create: " + err.Error()
	}
	defer func() { _, _ = db.Exec(context.Background(), "drop collection "+q) }()
	for i := int64(1); i <= int64(c.or(c.Rounds, 20)); i++ {
		if _, err := db.From(q).Insert(ctx, D("id", 1, "payload", D("round", i), "run_at", Expr("now()"))); err != nil {
			return fmt.Sprintf("round %d: put: %v", i, err)
		}
		rows, err := db.From(q).Where("id", "=", 1).Rows(ctx)
		if err != nil || len(rows) != 1 {
			return fmt.Sprintf("round %d: one row / %v %v", i, rows, err)
		}
		if p, _ := rows[0]["payload"].(map[string]any); p["round"] != i {
			return fmt.Sprintf("round %d: the row just written / %v", i, rows[0])
		}
	}
	return ""
}

// TestLiveReplicaCases plays the shared replica cases against the primary and replica test.sh starts
// (FENEC_TEST_PRIMARY_URL, FENEC_TEST_REPLICA_URL).
func TestLiveReplicaCases(t *testing.T) {
	primary, replica := liveURL(t, "FENEC_TEST_PRIMARY_URL"), liveURL(t, "FENEC_TEST_REPLICA_URL")
	var out bytes.Buffer
	tally := runReplicaScenariosFile(&out, filepath.Join(repoRoot(), "conformance", "replica-scenarios.json"), primary, replica)
	if tally.fail > 0 || tally.ok != len(replicaPlayers) {
		t.Fatalf("replica cases:\n%s", out.String())
	}
}
