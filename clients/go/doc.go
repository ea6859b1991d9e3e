// Package fenecdb is the Go client of a FenecDB server: an immutable builder that writes FenecQL text and
// its parameters, a client that sends it over HTTP, and a worker helper for job queues. It uses the
// standard library only.
//
// Connect with New, start a query with Client.From (or From for text only), and end it with a read
// (Rows, First, Count, RowsAs), a write (Insert, Update, Delete, with the options All, Require and
// Returning) or a text-only ending (ToFenecQL, ToInsert, ToUpdate, ToDelete):
//
//	db := fenecdb.New("http://127.0.0.1:8080", fenecdb.WithToken(token))
//	res, err := db.Wait(20*time.Second).From("mail").WhereCond(fenecdb.Raw("run_at <= now()")).
//		Order("run_at", "asc").Limit(5).
//		Update(ctx, fenecdb.D("owner", tag, "run_at", fenecdb.Expr("now() + ?", 60000), "attempts", fenecdb.Inc(1)),
//			fenecdb.Returning("*"))
//
// A chain the builder refuses ends in a *QueryError, before anything is sent; a refusal of the server is
// an *Error with its Status and Code (412 is CodeUnmet); cancellation and deadlines come back as the
// context's errors, wrapped. Worker runs the claim, ack, extend and fail loop of a queue: Worker.Run with
// a heartbeat, a concurrency bound, retries through a server that goes away, and graceful (ctx, Shutdown)
// and hard (Close) stops.
//
// The text every chain writes is the same, byte for byte, in every FenecDB SDK; the shared conformance
// vectors hold the package to it.
package fenecdb
