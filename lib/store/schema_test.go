package store

import "testing"

// parseSchema accepts exactly what ^impyard\.([a-z]+)/([0-9]+)$ matched.
func TestParseSchema(t *testing.T) {
	for s, want := range map[string]bool{
		"impyard.task/1": true, "impyard.decision/12": true, "impyard.a/0": true,
		"impyard.task/": false, "impyard./1": false, "impyard.task/1x": false, "impyard.Task/1": false,
		"impyard.ta-sk/1": false, "xmpyard.task/1": false, "impyard.task/1/2": false, "impyard.task": false,
		" impyard.task/1": false, "impyard.task/-1": false, "": false,
	} {
		kind, major, ok := parseSchema(s)
		if ok != want {
			t.Errorf("parseSchema(%q) = %q %q %v, want ok %v", s, kind, major, ok, want)
		}
	}
	if kind, major, _ := parseSchema("impyard.gate/3"); kind != "gate" || major != "3" {
		t.Errorf("parts %q %q", kind, major)
	}
}
