package cron_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/daemon/schedule/cron"
)

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestNext lists, for expressions in several zones, the times that follow
// a start, in order: plain cases, names and steps, the day-of-month or
// day-of-week rule, leap days, and the daylight-saving transitions of New
// York and Berlin (a skipped time fires at the end of the gap, once; a
// repeated time fires at its first occurrence only).
func TestNext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, expr, zone, after string
		want                    []string
	}{
		{"EveryMinuteUTC", "* * * * *", "UTC", "2026-01-01T10:00:30Z",
			[]string{"2026-01-01T10:01:00Z", "2026-01-01T10:02:00Z"}},
		{"DailyAtEightBerlinWinter", "0 8 * * *", "Europe/Berlin", "2026-01-05T12:00:00Z",
			[]string{"2026-01-06T08:00:00+01:00", "2026-01-07T08:00:00+01:00"}},
		{"WeekdaysByNameAcrossAWeekend", "0 8 * * MON-FRI", "Europe/Berlin", "2026-01-09T08:00:00+01:00",
			[]string{"2026-01-12T08:00:00+01:00", "2026-01-13T08:00:00+01:00"}},
		{"HalfHourZoneWithoutDST", "0 9 * * *", "Asia/Kolkata", "2026-06-01T00:00:00Z",
			[]string{"2026-06-01T09:00:00+05:30", "2026-06-02T09:00:00+05:30"}},
		{"StepsInsideARange", "*/20 9-10 * * *", "UTC", "2026-01-01T09:10:00Z",
			[]string{"2026-01-01T09:20:00Z", "2026-01-01T09:40:00Z", "2026-01-01T10:00:00Z", "2026-01-01T10:20:00Z",
				"2026-01-01T10:40:00Z", "2026-01-02T09:00:00Z"}},
		{"StartWithStepRunsToTheEnd", "10/20 0 * * *", "UTC", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T00:10:00Z", "2026-01-01T00:30:00Z", "2026-01-01T00:50:00Z", "2026-01-02T00:10:00Z"}},
		{"BothDayFieldsRestrictedMeansEither", "0 0 13 * FRI", "UTC", "2026-02-01T00:00:00Z",
			[]string{"2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z", "2026-02-20T00:00:00Z", "2026-02-27T00:00:00Z",
				"2026-03-06T00:00:00Z", "2026-03-13T00:00:00Z"}},
		{"StarStepDayOfWeekIsStillAStar", "0 0 1 * */1", "UTC", "2026-01-15T00:00:00Z",
			[]string{"2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"}},
		{"SundayAsSeven", "0 12 * * 7", "UTC", "2026-01-01T00:00:00Z",
			[]string{"2026-01-04T12:00:00Z", "2026-01-11T12:00:00Z"}},
		{"LeapDay", "0 0 29 2 *", "UTC", "2026-03-01T00:00:00Z",
			[]string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		{"Macro", "@monthly", "UTC", "2026-01-15T00:00:00Z",
			[]string{"2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"}},

		// New York springs forward on 8 March 2026: 02:00 EST becomes
		// 03:00 EDT, so 02:30 does not exist that day.
		{"SkippedTimeFiresAtTheEndOfTheGap", "30 2 * * *", "America/New_York", "2026-03-07T12:00:00-05:00",
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"HourlyAcrossTheGapFiresOnceAtItsEnd", "0 * * * *", "America/New_York", "2026-03-08T00:30:00-05:00",
			[]string{"2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"}},
		{"QuarterHoursInTheGapCollapseToOneFire", "*/15 2 * * *", "America/New_York", "2026-03-08T01:00:00-05:00",
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"}},
		// It falls back on 1 November 2026: 02:00 EDT becomes 01:00 EST,
		// so 01:30 happens twice.
		{"RepeatedTimeFiresAtTheFirstOccurrence", "30 1 * * *", "America/New_York", "2026-10-31T12:00:00-04:00",
			[]string{"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
		{"RepeatedHourIsNotFiredAgain", "*/30 * * * *", "America/New_York", "2026-11-01T00:45:00-04:00",
			[]string{"2026-11-01T01:00:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T02:00:00-05:00",
				"2026-11-01T02:30:00-05:00"}},
		{"StartingInsideTheRepeatedHour", "*/30 * * * *", "America/New_York", "2026-11-01T01:10:00-05:00",
			[]string{"2026-11-01T02:00:00-05:00"}},
		// Berlin springs forward on 29 March 2026 (02:00 CET to 03:00
		// CEST) and falls back on 25 October (03:00 CEST to 02:00 CET).
		{"BerlinSpringForward", "15 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00+01:00",
			[]string{"2026-03-29T03:00:00+02:00", "2026-03-30T02:15:00+02:00"}},
		{"BerlinFallBack", "15 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00+02:00",
			[]string{"2026-10-25T02:15:00+02:00", "2026-10-26T02:15:00+01:00"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := cron.Parse(tt.expr)
			if err != nil {
				t.Fatal(err)
			}
			loc := mustLoad(t, tt.zone)
			at := mustTime(t, tt.after)
			for i, w := range tt.want {
				want := mustTime(t, w)
				got := s.Next(at, loc)
				if !got.Equal(want) {
					t.Fatalf("next %d after %s = %s, want %s", i+1, at.In(loc), got.In(loc), want.In(loc))
				}
				if got.Location() != loc {
					t.Errorf("next %d is in %s, want %s", i+1, got.Location(), loc)
				}
				at = got
			}
		})
	}
}

// TestResolveAmbiguousAndSkippedTimes checks the instant of a wall-clock
// time in the two kinds of transition directly.
func TestResolveAmbiguousAndSkippedTimes(t *testing.T) {
	t.Parallel()
	ny := mustLoad(t, "America/New_York")
	if got, want := cron.Resolve(2026, time.November, 1, 1, 30, ny), mustTime(t, "2026-11-01T05:30:00Z"); !got.Equal(want) {
		t.Errorf("01:30 on the fall-back day = %s, want its first occurrence %s", got.UTC(), want)
	}
	if got, want := cron.Resolve(2026, time.March, 8, 2, 30, ny), mustTime(t, "2026-03-08T07:00:00Z"); !got.Equal(want) {
		t.Errorf("02:30 on the spring-forward day = %s, want the end of the gap %s", got.UTC(), want)
	}
	if got, want := cron.Resolve(2026, time.July, 1, 9, 0, ny), mustTime(t, "2026-07-01T13:00:00Z"); !got.Equal(want) {
		t.Errorf("09:00 on a summer day = %s, want %s", got.UTC(), want)
	}
}

// TestParseRefusesWithTheFieldAtFault checks that every malformed
// expression is refused, naming the field and what is wrong with it.
func TestParseRefusesWithTheFieldAtFault(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr  string
		field int
		msg   string
	}{
		{"", 0, "0 fields, want 5"},
		{"* * * *", 0, "4 fields, want 5"},
		{"0 8 * * * *", 0, "seconds are not supported"},
		{"@every 5m", 0, "unknown macro"},
		{"60 * * * *", 1, "60 is out of range 0-59"},
		{"0 24 * * *", 2, "24 is out of range 0-23"},
		{"0 0 0 * *", 3, "0 is out of range 1-31"},
		{"0 0 * 13 *", 4, "13 is out of range 1-12"},
		{"0 0 * * 8", 5, "8 is out of range 0-7"},
		{"5-2 * * * *", 1, "runs backwards"},
		{"*/0 * * * *", 1, "step \"0\" must be a positive number"},
		{"1,,2 * * * *", 1, "empty list item"},
		{"FOO * * * *", 1, "is not a number 0-59"},
		{"0 0 * JANX *", 4, "neither a number 1-12 nor a name JAN-DEC"},
		{"0 0 * * MONDAY", 5, "neither a number 0-7 nor a name SUN-SAT"},
		{"0 0 ? * *", 3, "Quartz forms"},
		{"0 0 30 2 *", 3, "never fires"},
		{"0 0 31 4,6,9,11 *", 3, "never fires"},
	}
	for _, tt := range tests {
		_, err := cron.Parse(tt.expr)
		var ce *cron.Error
		if !errors.As(err, &ce) {
			t.Errorf("Parse(%q) = %v, want a *cron.Error", tt.expr, err)
			continue
		}
		if ce.Field != tt.field || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("Parse(%q): field %d, %q; want field %d and %q", tt.expr, ce.Field, err, tt.field, tt.msg)
		}
	}
	// Both day fields restricted: the 30th of February never comes, but
	// every Monday of February does.
	if _, err := cron.Parse("0 0 30 2 MON"); err != nil {
		t.Errorf("Parse(0 0 30 2 MON) = %v", err)
	}
}

// TestParseNormalisesTheExpression checks String.
func TestParseNormalisesTheExpression(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"  0   8 * *  mon-fri ": "0 8 * * mon-fri", "@DAILY": "0 0 * * *"} {
		s, err := cron.Parse(in)
		if err != nil || s.String() != want {
			t.Errorf("Parse(%q) = %v, %v; want %q", in, s, err, want)
		}
	}
}

// BenchmarkNextLeapDay measures the longest search Next does in practice
// (years of days ruled out one by one).
func BenchmarkNextLeapDay(b *testing.B) {
	s, err := cron.Parse("0 0 29 2 *")
	if err != nil {
		b.Fatal(err)
	}
	at := time.Date(2097, 3, 1, 0, 0, 0, 0, time.UTC)
	for b.Loop() {
		if s.Next(at, time.UTC).IsZero() {
			b.Fatal("no next time")
		}
	}
}
