package fenecdb

// Values: what goes into a statement as a parameter, and what comes back in a row.
//
// A value is always a parameter, never text (clients.md §2). Strings, numbers, booleans, nil, slices and
// maps go as JSON values; an integer stays an integer; a time.Time goes as ISO-8601 UTC text to the
// millisecond (R14); a []float32 as a plain list of numbers. A document keeps its field order when it is
// a Doc (made by D), goes in sorted key order when it is a map, and in json order when it is a struct.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Row is one answered document: field name to value. Integers come back as int64, other numbers as
// float64, json objects as map[string]any, lists as []any, timestamps as their ISO text.
type Row map[string]any

// Doc is a document that keeps its field order. Make one with D.
type Doc struct {
	keys []string
	vals []any
	err  *QueryError
}

// D makes a document from keys and values in turn: D("owner", o, "attempts", Inc(1)).
// A key is a field or a path (payload.to); a value may be a plain value, Expr or Inc.
func D(kv ...any) Doc {
	var d Doc
	if len(kv)%2 != 0 {
		d.err = refuse("D takes keys and values in pairs (got %d arguments)", len(kv))
		return d
	}
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			d.err = refuse("a document key is a text (got %T)", kv[i])
			return d
		}
		d.keys = append(d.keys, k)
		d.vals = append(d.vals, kv[i+1])
	}
	return d
}

// Len is the number of fields of the document.
func (d Doc) Len() int { return len(d.keys) }

// MarshalJSON writes the document as a JSON object, fields in their order.
func (d Doc) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	if err := encodeValue(&b, d); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Computed is a value a patch works out at the server: Expr or Inc. It is not a parameter.
type Computed struct {
	inc    bool
	text   string
	params []any
	by     any
	err    *QueryError
}

// Expr is a computed value: text with each `?` replaced by the next parameter (R16), such as
// Expr("now() + ?", 60000). Every `?` is a placeholder.
func Expr(text string, params ...any) Computed {
	c := Computed{text: text, params: params}
	c.err = countPlaceholders("expr", text, len(params))
	return c
}

// Inc adds by to the field it is written to, counting a null as 0: f: coalesce(f, 0) + $n (R16).
// It reads the row it changes, so it goes in an update, never an insert.
func Inc(by any) Computed {
	c := Computed{inc: true, by: by}
	if !isFiniteNumber(by) {
		c.err = refuse("inc() takes a number: %s", jsonOf(by))
	}
	return c
}

func isFiniteNumber(v any) bool {
	switch n := v.(type) {
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return true
	case float32:
		return !math.IsNaN(float64(n)) && !math.IsInf(float64(n), 0)
	case float64:
		return !math.IsNaN(n) && !math.IsInf(n, 0)
	case json.Number:
		f, err := strconv.ParseFloat(string(n), 64)
		return err == nil && !math.IsInf(f, 0)
	}
	return false
}

// jsonOf writes a value as JSON for a refusal; what JSON cannot hold reads null, as JavaScript writes it.
func jsonOf(v any) string {
	var b bytes.Buffer
	if err := encodeValue(&b, v); err != nil {
		return "null"
	}
	return b.String()
}

// countPlaceholders checks that a raw() or expr() text has exactly one parameter per `?`.
func countPlaceholders(who, text string, given int) *QueryError {
	n := strings.Count(text, "?")
	switch {
	case n > given:
		return refuse("%s(): more `?` placeholders than parameters", who)
	case n < given:
		return refuse("%s(): too many parameters given", who)
	}
	return nil
}

// substitute writes text with each `?` replaced by the placeholder bind gives its parameter.
func substitute(text string, params []any, bind func(any) string) string {
	if len(params) == 0 {
		return text
	}
	var b strings.Builder
	i := 0
	for _, r := range text {
		if r == '?' && i < len(params) {
			b.WriteString(bind(params[i]))
			i++
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// isoMillis is R14's form of a time: UTC, to the millisecond.
func isoMillis(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// encodeValue is the wire encoder of parameters: JSON, with Doc in its order and times as R14 text.
func encodeValue(b *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case Doc:
		if x.err != nil {
			return x.err
		}
		b.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := marshalNoEscape(k)
			b.Write(kb)
			b.WriteByte(':')
			if err := encodeValue(b, x.vals[i]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case *Doc:
		if x == nil {
			b.WriteString("null")
			return nil
		}
		return encodeValue(b, *x)
	case Computed:
		return refuse("expr() and inc() are values of a document written by an update or an insert")
	case time.Time:
		b.WriteString(`"` + isoMillis(x) + `"`)
	case *time.Time:
		if x == nil {
			b.WriteString("null")
			return nil
		}
		b.WriteString(`"` + isoMillis(*x) + `"`)
	case json.Number:
		if _, err := strconv.ParseFloat(string(x), 64); err != nil {
			return fmt.Errorf("fenecdb: %q is not a number", string(x))
		}
		b.WriteString(string(x))
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := marshalNoEscape(k)
			b.Write(kb)
			b.WriteByte(':')
			if err := encodeValue(b, x[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case Row:
		return encodeValue(b, map[string]any(x))
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := encodeValue(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	default:
		raw, err := marshalNoEscape(v)
		if err != nil {
			return fmt.Errorf("fenecdb: cannot send %T as a value: %w", v, err)
		}
		b.Write(raw)
	}
	return nil
}

// isNull tells a nil, or a nil pointer, map or slice held in an interface, from a value.
func isNull(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// listOf gives the elements of a slice or an array (not of a Doc, a []byte or a text), for `in`.
func listOf(v any) ([]any, bool) {
	switch x := v.(type) {
	case []any:
		return x, true
	case []byte, string, nil:
		return nil, false
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return nil, false
	}
	out := make([]any, rv.Len())
	for i := range out {
		out[i] = rv.Index(i).Interface()
	}
	return out, true
}

// decodeOrdered decodes JSON keeping the order of every object (as Doc) and numbers as json.Number.
func decodeOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeOrderedValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("fenecdb: trailing data after the JSON value")
	}
	return v, nil
}

func decodeOrderedValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := Doc{keys: []string{}, vals: []any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeOrderedValue(dec)
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
			}
			_, err := dec.Token()
			return d, err
		case '[':
			list := []any{}
			for dec.More() {
				v, err := decodeOrderedValue(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			_, err := dec.Token()
			return list, err
		}
		return nil, fmt.Errorf("fenecdb: unexpected %v", t)
	default:
		return tok, nil
	}
}

// decodeAnswer decodes an answer body: integers as int64, other numbers as float64, objects as Row-like
// maps (map[string]any).
func decodeAnswer(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("fenecdb: the server's answer is not JSON: %w", err)
	}
	return plainNumbers(v), nil
}

func plainNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i
		}
		f, _ := strconv.ParseFloat(string(x), 64)
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = plainNumbers(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = plainNumbers(e)
		}
		return x
	}
	return v
}

// toDoc turns one document argument into a Doc: a Doc, a map with text keys (sorted), or a struct (json
// order).
func toDoc(v any) (Doc, *QueryError) {
	switch x := v.(type) {
	case Doc:
		return x, x.err
	case *Doc:
		if x != nil {
			return *x, x.err
		}
	case map[string]any:
		return sortedDoc(x), nil
	case Row:
		return sortedDoc(x), nil
	}
	rv := reflect.ValueOf(v)
	for rv.IsValid() && rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv = rv.Elem()
	}
	switch {
	case rv.IsValid() && rv.Kind() == reflect.Map && rv.Type().Key().Kind() == reflect.String:
		m := make(map[string]any, rv.Len())
		iter := rv.MapRange()
		for iter.Next() {
			m[iter.Key().String()] = iter.Value().Interface()
		}
		return sortedDoc(m), nil
	case rv.IsValid() && rv.Kind() == reflect.Struct && rv.Type() != reflect.TypeOf(time.Time{}):
		raw, err := json.Marshal(rv.Interface())
		if err != nil {
			return Doc{}, refuse("cannot write %T as a document: %v", v, err)
		}
		d, err := decodeOrdered(raw)
		if err != nil {
			return Doc{}, refuse("cannot write %T as a document: %v", v, err)
		}
		if doc, ok := d.(Doc); ok {
			return doc, nil
		}
	}
	return Doc{}, refuse("a document is a fenecdb.D, a map or a struct (got %T)", v)
}

func sortedDoc(m map[string]any) Doc {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	d := Doc{keys: keys, vals: make([]any, len(keys))}
	for i, k := range keys {
		d.vals[i] = m[k]
	}
	return d
}
