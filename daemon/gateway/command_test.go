package gateway_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/choirhq/choir/daemon/gateway"
)

func TestParseCommand(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, text string
		wantName   string
		wantArgs   []string
		wantRest   string
		wantOK     bool
	}{
		{"BareCommand", "/status", "status", nil, "", true},
		{"CommandWithArgs", "/model llm fast", "model", []string{"llm", "fast"}, "llm fast", true},
		{"OwnBotSuffixIsStripped", "/approve@Choir_Bot 42", "approve", []string{"42"}, "42", true},
		{"OtherBotIsNotUs", "/approve@other_bot 42", "approve", nil, "", false},
		{"NameIsLowerCased", "/Status", "status", nil, "", true},
		{"RestIsVerbatim", "/inject  look at\nthis  ", "inject", []string{"look", "at", "this"}, " look at\nthis  ", true},
		{"NewlineEndsTheName", "/inject\nsecond line", "inject", []string{"second", "line"}, "second line", true},
		{"KeyValueArgs", "/start helper workspace=scratch llm=fast", "start", []string{"helper", "workspace=scratch", "llm=fast"},
			"helper workspace=scratch llm=fast", true},
		{"PathIsText", "/etc/hosts is broken", "", nil, "", false},
		{"SlashAloneIsText", "/", "", nil, "", false},
		{"SlashSpaceIsText", "/ hello", "", nil, "", false},
		{"PlainTextIsText", "hello /status", "", nil, "", false},
		{"OverlongNameIsText", "/abcdefghijklmnopqrstuvwxyz0123456789", "", nil, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			name, args, rest, ok := gateway.ParseCommand(c.text, "choir_bot")
			if name != c.wantName || !slices.Equal(args, c.wantArgs) || rest != c.wantRest || ok != c.wantOK {
				t.Errorf("ParseCommand(%q) = %q %q %q %v, want %q %q %q %v", c.text, name, args, rest, ok,
					c.wantName, c.wantArgs, c.wantRest, c.wantOK)
			}
		})
	}
}

func TestParseCallback(t *testing.T) {
	t.Parallel()
	const id = "0b9d5e4c-2f3a-4c1d-9e8f-7a6b5c4d3e2f"
	for _, c := range []struct {
		name, data  string
		wantApprove bool
		wantErr     bool
	}{
		{"Approve", "approve:" + id, true, false},
		{"Reject", "reject:" + id, false, false},
		{"TelebotUniqueForm", "\fapprove|" + id, true, false},
		{"TelebotUniqueReject", "\freject|" + id, false, false},
		{"UnknownAction", "launch:" + id, false, true},
		{"NotAUUID", "approve:42", false, true},
		{"BracedUUID", "approve:{" + id + "}", false, true},
		{"UpperCaseUUIDIsNormalised", "approve:0B9D5E4C-2F3A-4C1D-9E8F-7A6B5C4D3E2F", true, false},
		{"NoSeparator", "approve", false, true},
		{"UniqueWithoutData", "\fapprove", false, true},
		{"Empty", "", false, true},
		{"TrailingGarbage", "approve:" + id + ";drop", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, approve, err := gateway.ParseCallback(c.data)
			if c.wantErr {
				if !errors.Is(err, gateway.ErrMalformedCallback) {
					t.Errorf("ParseCallback(%q) = %q, %v, want ErrMalformedCallback", c.data, got, err)
				}
				return
			}
			if err != nil || got != id || approve != c.wantApprove {
				t.Errorf("ParseCallback(%q) = %q %v %v", c.data, got, approve, err)
			}
		})
	}

	t.Run("ButtonsRoundTrip", func(t *testing.T) {
		t.Parallel()
		kb := gateway.ApprovalButtons(id).InlineKeyboard
		if len(kb) != 1 || len(kb[0]) != 2 {
			t.Fatalf("keyboard = %+v", kb)
		}
		for i, want := range []bool{true, false} {
			got, approve, err := gateway.ParseCallback(kb[0][i].Data)
			if err != nil || got != id || approve != want || len(kb[0][i].Data) > 64 {
				t.Errorf("button %q parses to %q %v %v", kb[0][i].Data, got, approve, err)
			}
		}
	})
}

func TestParseResendCallback(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, data string
		wantID     int64
		wantOK     bool
		wantErr    bool
	}{
		{"AsTheButtonMakesIt", gateway.ResendButton(42).InlineKeyboard[0][0].Data, 42, true, false},
		{"TelebotUniqueForm", "\fresend|7", 7, true, false},
		{"ApprovalIsNotOurs", "approve:4d7f2c1e-8a91-4c5b-9d3e-2f6a8b1c0d9e", 0, false, false},
		{"OtherDataIsNotOurs", "resending:1", 0, false, false},
		{"NoNumber", "resend:", 0, true, true},
		{"NotANumber", "resend:abc", 0, true, true},
		{"Negative", "resend:-3", 0, true, true},
		{"LeadingZero", "resend:042", 0, true, true},
		{"Zero", "resend:0", 0, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			id, ok, err := gateway.ParseResendCallback(c.data)
			if id != c.wantID || ok != c.wantOK || (err != nil) != c.wantErr {
				t.Errorf("ParseResendCallback(%q) = %d %v %v, want %d %v err %v", c.data, id, ok, err, c.wantID, c.wantOK, c.wantErr)
			}
			if err != nil && !errors.Is(err, gateway.ErrMalformedCallback) {
				t.Errorf("error %v is not ErrMalformedCallback", err)
			}
		})
	}
}
