package fenecdb

// The errors of this package, in one place:
//
//	error
//	├── *QueryError   a chain the builder refused before sending (clients.md §5); no request was made.
//	│                 Message is the exact text of the rule, with no prefix.
//	├── *Error        a refusal the server answered: Status (the HTTP status), Code (named below),
//	│                 Message (the body's "error"), At and Completed (a batch that stopped; At is -1 otherwise),
//	│                 Primary (the primary a replica's 403 names).
//	└── wrapped context.Canceled / context.DeadlineExceeded, and network errors, as the standard library
//	    gives them (find them with errors.Is).
//
// Branch on Status or Code, never on Message: the server's wording may change.

import (
	"fmt"
	"strconv"
)

// QueryError is a chain the builder refused. No request was sent.
type QueryError struct {
	// Message is the exact refusal of the text rules, shared by every FenecDB SDK.
	Message string
}

func (e *QueryError) Error() string { return "fenecdb: " + e.Message }

func refuse(format string, args ...any) *QueryError {
	return &QueryError{Message: fmt.Sprintf(format, args...)}
}

// Code names a server refusal, from its HTTP status.
type Code string

// The codes of clients.md §1. Any other status is "http_<status>".
const (
	CodeBadRequest   Code = "bad_request"  // 400: does not parse, bad parameter, a claim the server cannot hold
	CodeUnauthorized Code = "unauthorized" // 401: no token, or a wrong one
	CodeForbidden    Code = "forbidden"    // 403: outside the token's rules; a write on a read-only server or a replica
	CodeNotFound     Code = "not_found"    // 404: collection or field not there
	CodeConflict     Code = "conflict"     // 409: id or @unique value taken
	CodeUnmet        Code = "unmet"        // 412: a require not met; nothing of it landed
	CodeKeyReused    Code = "key_reused"   // 422: an Idempotency-Key reused with another request
	CodeUnavailable  Code = "unavailable"  // 503
	CodeTimeout      Code = "timeout"      // 504
	CodeStorageFull  Code = "storage_full" // 507
)

// CodeOf gives the Code of an HTTP status.
func CodeOf(status int) Code {
	switch status {
	case 400:
		return CodeBadRequest
	case 401:
		return CodeUnauthorized
	case 403:
		return CodeForbidden
	case 404:
		return CodeNotFound
	case 409:
		return CodeConflict
	case 412:
		return CodeUnmet
	case 422:
		return CodeKeyReused
	case 503:
		return CodeUnavailable
	case 504:
		return CodeTimeout
	case 507:
		return CodeStorageFull
	}
	return Code("http_" + strconv.Itoa(status))
}

// Error is a refusal answered by the server: a status of 400 or more with {"error": ...}.
type Error struct {
	Status    int
	Code      Code
	Message   string
	At        int // the index of the statement that stopped a batch, from 0; -1 otherwise
	Completed int // statements of a stopped batch that stayed applied (0: a batch lands whole)
	// Primary: a replica's 403 names its primary here (its Fenec-Primary header); nothing was done there.
	// The client follows it by itself; it reaches the caller only past the hops one call may take.
	Primary string

	retryAfter bool // the answer had Retry-After
}

func (e *Error) Error() string {
	s := fmt.Sprintf("fenecdb: %d %s: %s", e.Status, e.Code, e.Message)
	if e.At >= 0 {
		s += fmt.Sprintf(" (statement %d)", e.At)
	}
	return s
}
