package mailbox

import (
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

func file(t *testing.T, y *yard.Yard, imp, msgID string) string {
	t.Helper()
	b, err := os.ReadFile(y.Path("mailbox", imp, msgID+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDelivery: reading the undelivered messages marks nothing; a message
// is delivered to the first run marked and to no other; a message removed
// meanwhile is skipped.
func TestDelivery(t *testing.T) {
	y := yardtest.New(t)
	first, _ := Send(y, "yuko", "alice", "skip sports")
	second, _ := Send(y, "yuko", "alice", "and weather")
	Send(y, "rex", "alice", "not for yuko")
	for range 2 {
		got, err := Undelivered(y, "yuko")
		if err != nil || len(got) != 2 || got[0].ID != first || got[1].ID != second {
			t.Fatalf("undelivered: %+v %v", got, err)
		}
	}
	if strings.Contains(file(t, y, "yuko", first), "delivered") {
		t.Fatalf("reading marked it:\n%s", file(t, y, "yuko", first))
	}
	if err := MarkDelivered(y, "yuko", "r-0000000000000001", []string{first}); err != nil {
		t.Fatal(err)
	}
	if err := MarkDelivered(y, "yuko", "r-0000000000000002", []string{first, second}); err != nil {
		t.Fatal(err)
	}
	if f := file(t, y, "yuko", first); !strings.Contains(f, `"delivered_to": "r-0000000000000001"`) {
		t.Errorf("delivered twice:\n%s", f)
	}
	if f := file(t, y, "yuko", second); !strings.Contains(f, `"delivered_to": "r-0000000000000002"`) {
		t.Errorf("not delivered:\n%s", f)
	}
	if got, _ := Undelivered(y, "yuko"); len(got) != 0 {
		t.Errorf("still undelivered: %+v", got)
	}
	if got, _ := Undelivered(y, "rex"); len(got) != 1 {
		t.Errorf("another imp's message: %+v", got)
	}
	gone, _ := Send(y, "yuko", "alice", "withdrawn")
	os.Remove(y.Path("mailbox", "yuko", gone+".json"))
	if err := MarkDelivered(y, "yuko", "r-0000000000000003", []string{gone}); err != nil {
		t.Errorf("a removed message: %v", err)
	}
	for _, bad := range []struct{ run, msg string }{{"../x", first}, {"r-0000000000000003", "../m"}} {
		if err := MarkDelivered(y, "yuko", bad.run, []string{bad.msg}); err == nil {
			t.Errorf("MarkDelivered(%q, %q) accepted", bad.run, bad.msg)
		}
	}
}

// TestDeliveryRefusesAMisnamedMessage: a message file whose id is not its
// name is refused, naming the file, so marking one id cannot leave
// another message undelivered for ever.
func TestDeliveryRefusesAMisnamedMessage(t *testing.T) {
	y := yardtest.New(t)
	a, _ := Send(y, "yuko", "alice", "one")
	b, _ := Send(y, "yuko", "alice", "two")
	data, _ := os.ReadFile(y.Path("mailbox", "yuko", a+".json"))
	os.WriteFile(y.Path("mailbox", "yuko", b+".json"), data, 0o640)
	if _, err := Undelivered(y, "yuko"); err == nil || !strings.Contains(err.Error(), b+".json") {
		t.Errorf("Undelivered: %v", err)
	}
}

// TestTakeOnce: runs polling at once each get a message, never the same
// one twice, and only what no run has yet; a bad run id takes nothing.
func TestTakeOnce(t *testing.T) {
	y := yardtest.New(t)
	var sent []string
	for range 20 {
		m, _ := Send(y, "yuko", "alice", "news")
		sent = append(sent, m)
	}
	if _, err := Take(y, "yuko", "not-a-run", nil, false); err == nil {
		t.Fatal("a bad run id was taken")
	}
	runs := []string{"r-0000000000000001", "r-0000000000000002", "r-0000000000000003"}
	var mu sync.Mutex
	var got []Message
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Go(func() {
			for range 5 {
				msgs, err := Take(y, "yuko", r, nil, false)
				if err != nil {
					t.Error(err)
				}
				for _, m := range msgs {
					if m.DeliveredTo != r {
						t.Errorf("%s taken by %s says delivered to %s", m.ID, r, m.DeliveredTo)
					}
				}
				mu.Lock()
				got = append(got, msgs...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, m := range got {
		if seen[m.ID] {
			t.Errorf("%s taken twice", m.ID)
		}
		seen[m.ID] = true
		if !strings.Contains(file(t, y, "yuko", m.ID), `"delivered_to": "`+m.DeliveredTo+`"`) {
			t.Errorf("%s not marked:\n%s", m.ID, file(t, y, "yuko", m.ID))
		}
	}
	if len(seen) != len(sent) {
		t.Errorf("%d of %d messages taken", len(seen), len(sent))
	}
}
