package judge

import (
	"bytes"
	"cmp"
	"slices"
	"strings"
)

// PlaceholderPrefix starts a fake credential a box holds in place of a
// real one; the gateway swaps it for the secret named after the prefix.
const PlaceholderPrefix = "IMPYARD_PLACEHOLDER_"

// Placeholder is one credential placeholder seen in a request.
type Placeholder struct {
	Where  string // lower-case header name, "url" or "body"
	Secret string // the characters after the prefix that may form a secret name
}

// FindPlaceholders lists the distinct placeholders in a request's
// headers, URL and body, sorted. Every occurrence of the prefix counts,
// even one followed by no valid secret name, so none can slip past the
// judge by being malformed.
func FindPlaceholders(h map[string][]string, rawURL string, body []byte) []Placeholder {
	var out []Placeholder
	for name, values := range h {
		for _, v := range values {
			// Most values hold none: look before copying the name or value.
			if strings.Contains(v, PlaceholderPrefix) {
				out = scan(out, strings.ToLower(name), []byte(v))
			}
		}
	}
	if strings.Contains(rawURL, PlaceholderPrefix) {
		out = scan(out, "url", []byte(rawURL))
	}
	out = scan(out, "body", body)
	slices.SortFunc(out, func(a, b Placeholder) int {
		return cmp.Or(cmp.Compare(a.Where, b.Where), cmp.Compare(a.Secret, b.Secret))
	})
	return slices.Compact(out)
}

func scan(out []Placeholder, where string, b []byte) []Placeholder {
	for {
		i := bytes.Index(b, []byte(PlaceholderPrefix))
		if i < 0 {
			return out
		}
		b = b[i+len(PlaceholderPrefix):]
		n := 0
		for n < len(b) && secretChar(b[n]) {
			n++
		}
		out = append(out, Placeholder{Where: where, Secret: string(b[:n])})
		b = b[n:]
	}
}

func secretChar(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}
