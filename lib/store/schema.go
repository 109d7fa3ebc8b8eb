package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/impyard/impyard/lib/strictjson"
)

// parseSchema splits "impyard.KIND/MAJOR" (KIND of a-z, MAJOR of
// digits) into its parts. Written out rather than as a regexp compiled
// at package init, which every short-lived command paid for at start.
func parseSchema(s string) (kind, major string, ok bool) {
	rest, ok := strings.CutPrefix(s, "impyard.")
	if !ok {
		return "", "", false
	}
	kind, major, ok = strings.Cut(rest, "/")
	if !ok || kind == "" || major == "" {
		return "", "", false
	}
	for _, c := range []byte(kind) {
		if c < 'a' || c > 'z' {
			return "", "", false
		}
	}
	for _, c := range []byte(major) {
		if c < '0' || c > '9' {
			return "", "", false
		}
	}
	return kind, major, true
}

// ErrUnknownMajor is a file of the right kind at a major version this
// impyard does not read: one written by a newer (or much older) impyard.
// Callers check for it before they take a lock, so refusing such a file
// writes nothing at all.
var ErrUnknownMajor = errors.New("is not supported")

// Schema returns the schema string for a kind at a major version.
func Schema(kind string, major int) string {
	return "impyard." + kind + "/" + strconv.Itoa(major)
}

// CheckSchema reads only the "schema" member of data and refuses anything
// but kind at major, naming path. Callers check before they write anything
// derived from the file, so a file from a newer impyard is never rewritten
// in an older shape.
func CheckSchema(path string, data []byte, kind string, major int) error {
	var h struct {
		Schema *string `json:"schema"`
	}
	if err := json.Unmarshal(data, &h); err != nil {
		return fmt.Errorf("%s: not valid JSON: %w", path, err)
	}
	if h.Schema == nil {
		return fmt.Errorf("%s: no \"schema\" member; want %q", path, Schema(kind, major))
	}
	k, m, ok := parseSchema(*h.Schema)
	if !ok || k != kind {
		return fmt.Errorf("%s: schema %q is not a %s file; want %q", path, *h.Schema, kind, Schema(kind, major))
	}
	if m != strconv.Itoa(major) {
		return fmt.Errorf("%s: schema %q %w (this impyard reads %q); refusing to read or change it", path, *h.Schema, ErrUnknownMajor, Schema(kind, major))
	}
	return nil
}

// Decode checks the schema and decodes data strictly into v.
func Decode(path string, data []byte, kind string, major int, v any) error {
	// A file as Encode writes it opens with its schema member; one that
	// opens with the schema wanted needs no separate reading of it, since
	// the strict decoding below refuses a second "schema".
	if !bytes.HasPrefix(data, []byte("{\n  \"schema\": \""+Schema(kind, major)+"\",\n")) {
		if err := CheckSchema(path, data, kind, major); err != nil {
			return err
		}
	}
	if err := strictjson.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// Encode renders v as the indented JSON every yard file uses, ending in a
// newline, without HTML escaping so payloads read as they were written.
func Encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Line renders v as one compact JSON line ending in a newline.
func Line(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
