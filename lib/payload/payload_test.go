package payload

import (
	"errors"
	"net/mail"
	"strings"
	"testing"
)

func TestParseAddress(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"team@ourco.com", "team@ourco.com"},
		{"Team.Lead+digest@OurCo.COM", "Team.Lead+digest@ourco.com"},
		{"a@localhost", "a@localhost"},
		{"o'brien@xn--bcher-kva.example", "o'brien@xn--bcher-kva.example"},
		{"x_y-z=1@sub.ourco.com", "x_y-z=1@sub.ourco.com"},
		{"azAZ09@azAZ09.com", "azAZ09@azaz09.com"},
		{"a#$&'*+-/=?^_`{|}~z@x.com", "a#$&'*+-/=?^_`{|}~z@x.com"},
		{"a@x.1a", "a@x.1a"},
		{strings.Repeat("a", 64) + "@x.com", strings.Repeat("a", 64) + "@x.com"},
		{"a@" + strings.Repeat("b", 63) + ".com", "a@" + strings.Repeat("b", 63) + ".com"},
		{long254, long254},
	} {
		got, err := ParseAddress(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseAddress(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// Each of these reads, to some parser, as a mailbox at a domain other than
// the one a glob would see, or as more than one mailbox.
func TestParseAddressRefusesHostileSpellings(t *testing.T) {
	for _, in := range []string{
		"",
		"attacker@evil.com, team@ourco.com",
		"attacker@evil.com,team@ourco.com",
		`"attacker@evil.com"@ourco.com`,
		`"a@b"@evil.com`,
		`"attacker,team"@ourco.com`,
		`"team"@ourco.com`,
		"Team <team@ourco.com>",
		"<team@ourco.com>",
		`"Team" <attacker@evil.com>`,
		"team@ourco.com <attacker@evil.com>",
		"undisclosed:attacker@evil.com;",
		"list: attacker@evil.com, team@ourco.com;",
		"team@ourco.com.",
		".team@ourco.com",
		"team.@ourco.com",
		"te..am@ourco.com",
		"team@ourco..com",
		"team@.ourco.com",
		"team@-ourco.com",
		"team@ourco-.com",
		"team@ourсo.com", // Cyrillic с
		"tеam@ourco.com", // Cyrillic е
		"team@ourco.com\u200b",
		"team@ourco.com ",
		" team@ourco.com",
		"team @ourco.com",
		"team@ourco.com\r\nBcc: attacker@evil.com",
		"team@ourco.com\n",
		"team@ourco.com\t",
		"team@ourco.com\x00",
		"team(x)@ourco.com",
		"team@ourco.com(x)",
		"(x)team@ourco.com",
		"team@(evil.com)ourco.com",
		"@a:b@c",
		"@evil.com:team@ourco.com",
		"attacker@evil.com@ourco.com",
		"a@b@c",
		"team@",
		"@ourco.com",
		"team",
		"attacker%evil.com@ourco.com",
		"evil.com!attacker@ourco.com",
		"team@[127.0.0.1]",
		"team@[IPv6:::1]",
		"team@10.0.0.1",
		`te\am@ourco.com`,
		`team\@evil.com@ourco.com`,
		"team@ourco.com;attacker@evil.com",
		"team@our_co.com",
		strings.Repeat("a", 65) + "@ourco.com",
		"a@" + strings.Repeat("b", 64) + ".com",
		"a@" + strings.Repeat("b.", 130) + "com",
		long254 + "d",
		"a@x.0",
		"a@x.9",
		"a:b@x.com",
		"a[b@x.com",
		"a@b:c.com",
		"a@b/c.com",
	} {
		got, err := ParseAddress(in)
		if err == nil || !errors.Is(err, ErrAddress) {
			t.Errorf("ParseAddress(%q) = %q, %v; want refused", in, got, err)
		}
	}
}

// long254 is an address of the longest length accepted.
var long254 = strings.Repeat("a", 64) + "@" + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)

func TestNames(t *testing.T) {
	for name, want := range map[string]bool{"to": true, "_x": true, "A-b_9": true, strings.Repeat("f", 64): true,
		"": false, "9a": false, "-a": false, "a.b": false, "a b": false, "ä": false, strings.Repeat("f", 65): false} {
		if ValidField(name) != want {
			t.Errorf("ValidField(%q) = %v", name, !want)
		}
	}
	for typ, want := range map[string]bool{Address: true, Text: true, Bool: true, Object: false, "nope": false} {
		if Matchable(typ) != want {
			t.Errorf("Matchable(%q) = %v", typ, !want)
		}
	}
}

func TestCheck(t *testing.T) {
	email := Fields{"to": Addresses, "cc": Addresses, "bcc": Addresses, "subject": Text, "body": Text,
		"reply_to": Address, "link": URL, "n": Number, "urgent": Bool, "meta": Object}
	for _, tc := range []struct {
		payload string
		want    error
		field   string
	}{
		{`{"to":["team@ourco.com"],"subject":"hi","body":"x"}`, nil, ""},
		{`{}`, nil, ""},
		{`{"reply_to":"a@ourco.com","link":"https://ourco.com/x?y=1","n":1.5e3,"urgent":false,"meta":{"k":[1]}}`, nil, ""},
		{`{"to":"attacker@evil.com, team@ourco.com","subject":"hi"}`, ErrType, "to"},
		{`{"reply_to":"attacker@evil.com, team@ourco.com"}`, ErrType, "reply_to"},
		{`{"to":["team@ourco.com"],"bcc":["attacker@evil.com, x@y.com"]}`, ErrType, "bcc"},
		{`{"to":[]}`, ErrType, "to"},
		{`{"to":[null]}`, ErrType, "to"},
		{`{"to":["team@ourco.com"],"from":"x@evil.com"}`, ErrUndeclared, "from"},
		{`{"To":["team@ourco.com"]}`, ErrUndeclared, "To"},
		{`{"subject":null}`, ErrType, "subject"},
		{`{"subject":1}`, ErrType, "subject"},
		{`{"n":"1"}`, ErrType, "n"},
		{`{"urgent":"true"}`, ErrType, "urgent"},
		{`{"meta":[1]}`, ErrType, "meta"},
		{`{"link":"https://user:pw@ourco.com/"}`, ErrType, "link"},
		{`{"link":"https://ourco.com@evil.com/"}`, ErrType, "link"},
		{`{"link":"ftp://ourco.com/"}`, ErrType, "link"},
		{`{"link":"/relative"}`, ErrType, "link"},
		{`{"link":"https:ourco.com"}`, ErrType, "link"},
		{`{"link":"https://ourco.com\\@evil.com/"}`, ErrType, "link"},
		{`{"link":"HTTPS://OURCO.COM/"}`, ErrType, "link"},
		{`{"link":"https://our co.com/"}`, ErrType, "link"},
		{`{"link":"http://ourco.com:8080/a"}`, nil, ""},
		{`{"link":"https://:443/"}`, ErrType, "link"},
		{`{"link":"https://ourco.com/\u007f"}`, ErrType, "link"},
		{`{"link":"https://ourcö.com/"}`, ErrType, "link"},
		{`{"link":"https://ourco.com/a b"}`, ErrType, "link"},
		{`{"link":"https://ourco.com/%7e"}`, nil, ""},
		{`{"link":"https://ourco.com/~user"}`, nil, ""},
		{`["team@ourco.com"]`, ErrNotObject, ""},
		{`"x"`, ErrNotObject, ""},
		{`{"to":["a@ourco.com"],"to":["b@ourco.com"]}`, ErrNotObject, ""},
		{`not json`, ErrNotObject, ""},
	} {
		err := Check(email, []byte(tc.payload))
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("Check(%s) = %v, want %v", tc.payload, err, tc.want)
			continue
		}
		if tc.field != "" && !strings.Contains(err.Error(), `field "`+tc.field+`"`) {
			t.Errorf("Check(%s) = %v, does not name field %q", tc.payload, err, tc.field)
		}
	}
	if err := Check(nil, []byte(`{"text":"hi"}`)); !errors.Is(err, ErrUndeclared) || !strings.Contains(err.Error(), "(declared: none)") {
		t.Errorf("no fields declared: %v", err)
	}
}

func TestStrings(t *testing.T) {
	got, err := Strings(Addresses, []byte(`["Team@OurCo.com","b@ourco.com"]`))
	if err != nil || strings.Join(got, ",") != "team@ourco.com,b@ourco.com" {
		t.Errorf("addresses: %q %v", got, err)
	}
	if got, _ := Strings(Number, []byte(`2.50`)); len(got) != 1 || got[0] != "2.50" {
		t.Errorf("number: %q", got)
	}
}

// FuzzParseAddress holds the parser to its promise: anything it accepts
// is one bare addr-spec (one @, no comma, no whitespace, ASCII), comes back
// unchanged but for the domain's case, parses again to itself, and is read
// by net/mail as the same single address with no display name.
func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{"team@ourco.com", "a@b", `"a@b"@evil.com`, "a <b@c>", "x@evil.com, y@ourco.com",
		"@a:b@c", "A@B.C", "a(x)@b.c", "a%b@c.d", "tеam@ourco.com", "a@b.c.", "a\r\n@b.c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseAddress(s)
		if err != nil {
			return
		}
		if strings.Count(got, "@") != 1 || strings.ContainsAny(got, ", \t\r\n\"<>()[]\\:;") {
			t.Fatalf("accepted %q as %q", s, got)
		}
		for _, r := range got {
			if r < 0x21 || r > 0x7e {
				t.Fatalf("accepted %q with %q", s, r)
			}
		}
		at := strings.IndexByte(s, '@')
		if got != s[:at]+"@"+strings.ToLower(s[at+1:]) {
			t.Fatalf("accepted %q as %q", s, got)
		}
		if again, err := ParseAddress(got); err != nil || again != got {
			t.Fatalf("%q re-parses to %q, %v", got, again, err)
		}
		a, err := mail.ParseAddress(s)
		if err != nil || a.Name != "" || a.Address != s {
			t.Fatalf("accepted %q, which net/mail reads as %+v, %v", s, a, err)
		}
	})
}

// A line is a text that will become a mail header or another one-line
// field: a CR or an LF in it, which would start a header of the
// proposer's own, is refused at the door, a text's is not.
func TestLine(t *testing.T) {
	f := Fields{"subject": Line, "body": Text}
	for _, tc := range []struct {
		payload string
		ok      bool
	}{
		{`{"subject":"Weekly digest","body":"a\r\nb"}`, true},
		{`{"subject":"tabs\tand unicode \u00e9 are fine"}`, true},
		{`{"subject":""}`, true},
		{`{"subject":"Weekly digest\r\nBcc: x@evil.com"}`, false},
		{`{"subject":"Weekly digest\nBcc: x@evil.com"}`, false},
		{`{"subject":"Weekly digest\r"}`, false},
		{`{"subject":["not","a string"]}`, false},
	} {
		err := Check(f, []byte(tc.payload))
		if tc.ok != (err == nil) || !tc.ok && !errors.Is(err, ErrType) {
			t.Errorf("Check(%s) = %v, want ok %v", tc.payload, err, tc.ok)
		}
	}
	if !ValidType(Line) || !Matchable(Line) {
		t.Errorf("line: valid %v, matchable %v", ValidType(Line), Matchable(Line))
	}
	if got, err := Strings(Line, []byte(`"Weekly digest"`)); err != nil || len(got) != 1 || got[0] != "Weekly digest" {
		t.Errorf("Strings(line) = %q, %v", got, err)
	}
}
