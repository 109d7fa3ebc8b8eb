package inbound

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Discord's signature headers, and the window its timestamp must fall in.
const (
	DiscordSignature = "X-Signature-Ed25519"
	DiscordTimestamp = "X-Signature-Timestamp"
	Window           = 5 * time.Minute
)

// githubEvent names a GitHub delivery's event; it is not signed, so it
// goes inside the fence with the content.
const githubEvent = "X-GitHub-Event"

// maxDelivery bounds a delivery id.
const maxDelivery = 128

// Discord interaction types and response types used here.
const (
	discordPing    = 1
	discordCommand = 2
	discordPong    = 1
	discordMessage = 4
	// discordEphemeral shows a response to its asker only.
	discordEphemeral = 64
)

func discordKey(s string) (ed25519.PublicKey, error) {
	k, err := hex.DecodeString(s)
	if err != nil || len(k) != ed25519.PublicKeySize {
		return nil, errors.New("public_key is not a hex Ed25519 public key")
	}
	return k, nil
}

// bodyKey identifies a body: a signature covers the body alone, so a
// captured delivery sent again under a new delivery id is still a replay.
func bodyKey(body []byte) string {
	sum := sha256.Sum256(body)
	return "body:" + hex.EncodeToString(sum[:])
}

// hmac verifies a GitHub-style delivery and files its body.
func (r *Relay) hmac(src *source, req *http.Request, body []byte, rec *Record) answer {
	v := req.Header.Get(src.Header)
	if v == "" {
		return refuse(http.StatusUnauthorized, fmt.Errorf("%w: no %s header", ErrSignature, src.Header))
	}
	h, ok := strings.CutPrefix(v, "sha256=")
	got, err := hex.DecodeString(h)
	if !ok || err != nil {
		return refuse(http.StatusUnauthorized, fmt.Errorf("%w: %s is not sha256=<hex>", ErrSignature, src.Header))
	}
	mac := hmac.New(sha256.New, src.key)
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return refuse(http.StatusUnauthorized, fmt.Errorf("%w: %s does not match the body", ErrSignature, src.Header))
	}
	delivery := req.Header.Get(src.DeliveryHeader)
	if err := checkDelivery(delivery); err != nil {
		return refuse(http.StatusBadRequest, fmt.Errorf("%w: %s: %v", ErrMalformed, src.DeliveryHeader, err))
	}
	rec.Delivery = delivery
	if len(body) == 0 {
		return refuse(http.StatusBadRequest, fmt.Errorf("%w: empty body", ErrMalformed))
	}
	content := string(body)
	if ev := req.Header.Get(githubEvent); ev != "" {
		content = githubEvent + ": " + ev + "\n\n" + content
	}
	about := fmt.Sprintf("Inbound delivery %q from source %q (%s, signature verified), filed for imp %s.", delivery, src.Name, src.Kind, src.Imp)
	// Nobody vouches for a webhook's sender: its work is proactive.
	taskID, err := r.file(src, []string{"delivery:" + delivery, bodyKey(body)}, untrusted(about, content), true)
	if err != nil {
		return fileRefusal(err)
	}
	rec.Verdict, rec.Task = Accepted, taskID
	b, _ := json.Marshal(map[string]string{"task": taskID})
	return answer{status: http.StatusAccepted, contentType: "application/json", body: append(b, '\n')}
}

// checkDelivery refuses a delivery id that is missing, long, or holds
// anything but printable ASCII.
func checkDelivery(s string) error {
	if s == "" {
		return errors.New("no delivery id")
	}
	if len(s) > maxDelivery {
		return fmt.Errorf("delivery id over %d bytes", maxDelivery)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return errors.New("delivery id holds a byte that is not printable ASCII")
		}
	}
	return nil
}

// fileRefusal is a failed file as the sender hears it: a replay is a
// conflict, anything else the yard's, worth retrying.
func fileRefusal(err error) answer {
	if errors.Is(err, ErrReplay) {
		return refuse(http.StatusConflict, err)
	}
	if errors.Is(err, ErrTooLarge) {
		return refuse(http.StatusRequestEntityTooLarge, err)
	}
	return refuse(http.StatusServiceUnavailable, fmt.Errorf("%w: %v", ErrFile, err))
}

// interaction is the part of a Discord interaction the relay reads.
type interaction struct {
	ID   string `json:"id"`
	Type int    `json:"type"`
	Data struct {
		Name    string          `json:"name"`
		Options []commandOption `json:"options"`
	} `json:"data"`
	Member *struct {
		User discordUser `json:"user"`
	} `json:"member"`
	User *discordUser `json:"user"`
}

type discordUser struct {
	ID string `json:"id"`
}

type commandOption struct {
	Name    string          `json:"name"`
	Value   json.RawMessage `json:"value"`
	Options []commandOption `json:"options"`
}

// text is the options' values, one a line, subcommands' included.
func optionsText(opts []commandOption, lines []string) []string {
	for _, o := range opts {
		if len(o.Value) > 0 {
			var s string
			if json.Unmarshal(o.Value, &s) != nil {
				s = string(o.Value)
			}
			if strings.TrimSpace(s) != "" {
				lines = append(lines, s)
			}
		}
		lines = optionsText(o.Options, lines)
	}
	return lines
}

// discord verifies an interaction, answers a PING and files an owner's
// application command.
func (r *Relay) discord(src *source, req *http.Request, body []byte, rec *Record) answer {
	sig, err := hex.DecodeString(req.Header.Get(DiscordSignature))
	ts := req.Header.Get(DiscordTimestamp)
	if err != nil || len(sig) != ed25519.SignatureSize || ts == "" {
		return refuse(http.StatusUnauthorized, fmt.Errorf("%w: no valid %s and %s", ErrSignature, DiscordSignature, DiscordTimestamp))
	}
	if !ed25519.Verify(src.key, append([]byte(ts), body...), sig) {
		return refuse(http.StatusUnauthorized, fmt.Errorf("%w: %s does not match the timestamp and body", ErrSignature, DiscordSignature))
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return refuse(http.StatusUnauthorized, fmt.Errorf("%w: %s %q is not unix seconds", ErrStale, DiscordTimestamp, ts))
	}
	if d := r.now().Sub(time.Unix(sec, 0)); d > Window || d < -Window {
		return refuse(http.StatusUnauthorized, fmt.Errorf("%w: signed %s from now, outside %s", ErrStale, d.Round(time.Second), Window))
	}
	var in interaction
	if err := json.Unmarshal(body, &in); err != nil {
		return refuse(http.StatusBadRequest, fmt.Errorf("%w: %v", ErrMalformed, err))
	}
	if in.ID == "" || len(in.ID) > 32 || strings.Trim(in.ID, "0123456789") != "" {
		return refuse(http.StatusBadRequest, fmt.Errorf("%w: interaction id %q is not a snowflake", ErrMalformed, in.ID))
	}
	rec.Delivery = in.ID
	switch in.Type {
	case discordPing:
		rec.Verdict = Ping
		return discordAnswer(map[string]any{"type": discordPong})
	case discordCommand:
	default:
		return refuse(http.StatusBadRequest, fmt.Errorf("%w: interaction type %d is not served", ErrMalformed, in.Type))
	}
	user := ""
	if in.Member != nil {
		user = in.Member.User.ID
	} else if in.User != nil {
		user = in.User.ID
	}
	rec.User = user
	if user == "" || !slices.Contains(src.Owners, user) {
		return refuse(http.StatusForbidden, fmt.Errorf("%w: user %q may not file tasks for %s", ErrNotOwner, user, src.Imp))
	}
	lines := optionsText(in.Data.Options, nil)
	if len(lines) == 0 {
		return refuse(http.StatusBadRequest, fmt.Errorf("%w: command /%s has no text in its options", ErrMalformed, in.Data.Name))
	}
	about := fmt.Sprintf("Inbound Discord command /%s from owner %s, through source %q (interaction %s, signature verified), filed for imp %s.", in.Data.Name, user, src.Name, in.ID, src.Imp)
	taskID, err := r.file(src, []string{"interaction:" + in.ID, bodyKey(body)}, untrusted(about, strings.Join(lines, "\n")), false)
	if err != nil {
		return fileRefusal(err)
	}
	rec.Verdict, rec.Task = Accepted, taskID
	return discordAnswer(map[string]any{"type": discordMessage, "data": map[string]any{
		"content": fmt.Sprintf("Filed task %s for %s.", taskID, src.Imp), "flags": discordEphemeral}})
}

func discordAnswer(v any) answer {
	b, _ := json.Marshal(v)
	return answer{status: http.StatusOK, contentType: "application/json", body: b}
}
