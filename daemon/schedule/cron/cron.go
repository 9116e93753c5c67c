// Package cron parses standard five-field cron expressions (minute, hour,
// day of month, month, day of week; lists, ranges, steps and the names of
// months and weekdays, as Vixie cron takes them) and finds the next time
// one names in a time zone. Daylight-saving transitions are handled by one
// rule: every wall-clock time the expression names fires once. A time that
// a transition skips fires at the first instant after the gap, and a time
// that occurs twice fires at its first occurrence only. The zone database
// is embedded, so zones resolve on hosts without tzdata.
package cron

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // zones resolve on hosts without a zone database
)

// Example is an expression to show beside an error.
const Example = `"0 8 * * MON-FRI" (08:00 on weekdays) or "*/15 9-17 * * *" (every 15 minutes from 09:00 to 17:45)`

// Schedule is a parsed cron expression.
type Schedule struct {
	expr              string
	minute, hour, dom uint64
	month, dow        uint64
	// domStar and dowStar mark day fields that start with *: Vixie
	// cron's test for which day rule applies (dayMatches).
	domStar, dowStar bool
}

// field describes one of the five fields.
type field struct {
	name     string
	min, max int
	names    []string // names[i] is value min+i
	lastName string   // the last name, for messages
}

var fields = [5]field{
	{name: "minute", min: 0, max: 59},
	{name: "hour", min: 0, max: 23},
	{name: "day of month", min: 1, max: 31},
	{name: "month", min: 1, max: 12,
		names: []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}, lastName: "DEC"},
	// 7 is Sunday too, as in Vixie cron.
	{name: "day of week", min: 0, max: 7, names: []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"}, lastName: "SAT"},
}

var macros = map[string]string{
	"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
	"@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

// Error is an expression that does not parse: Field is the 1-based field
// at fault (0 for the whole expression).
type Error struct {
	Expr  string
	Field int
	Text  string
	Msg   string
}

func (e *Error) Error() string {
	if e.Field == 0 {
		return fmt.Sprintf("cron expression %q: %s", e.Expr, e.Msg)
	}
	return fmt.Sprintf("cron expression %q: field %d (%s) %q: %s", e.Expr, e.Field, fields[e.Field-1].name, e.Text, e.Msg)
}

// Parse parses a five-field expression, or one of @yearly, @annually,
// @monthly, @weekly, @daily, @midnight and @hourly. An expression that no
// date can ever match (the 30th of February) is an error.
func Parse(expr string) (*Schedule, error) {
	src := strings.TrimSpace(expr)
	if strings.HasPrefix(src, "@") {
		m, ok := macros[strings.ToLower(src)]
		if !ok {
			return nil, &Error{Expr: expr, Msg: "unknown macro: use @yearly, @monthly, @weekly, @daily, @hourly or five fields"}
		}
		src = m
	}
	parts := strings.Fields(src)
	switch {
	case len(parts) == 6:
		return nil, &Error{Expr: expr, Msg: "6 fields, but seconds are not supported: give minute hour day-of-month month day-of-week"}
	case len(parts) != 5:
		return nil, &Error{Expr: expr, Msg: fmt.Sprintf("%d fields, want 5: minute hour day-of-month month day-of-week", len(parts))}
	}
	s := &Schedule{expr: strings.Join(parts, " ")}
	sets := [5]*uint64{&s.minute, &s.hour, &s.dom, &s.month, &s.dow}
	for i, p := range parts {
		set, err := parseField(p, fields[i])
		if err != nil {
			return nil, &Error{Expr: expr, Field: i + 1, Text: p, Msg: err.Error()}
		}
		*sets[i] = set
	}
	// Sunday is 0 and 7.
	if s.dow&(1<<7) != 0 {
		s.dow = s.dow&^(1<<7) | 1
	}
	s.domStar, s.dowStar = strings.HasPrefix(parts[2], "*"), strings.HasPrefix(parts[4], "*")
	if !s.domStar && s.dowStar && !s.someDateExists() {
		return nil, &Error{Expr: expr, Field: 3, Text: parts[2], Msg: "no month named in field 4 has such a day, so it never fires"}
	}
	return s, nil
}

// String is the expression, its fields separated by single spaces.
func (s *Schedule) String() string { return s.expr }

// daysIn is the most days month m (1-12) can have.
var daysIn = [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}

func (s *Schedule) someDateExists() bool {
	for m := 1; m <= 12; m++ {
		if s.month&(1<<m) != 0 && s.dom&(1<<(daysIn[m]+1)-1) != 0 {
			return true
		}
	}
	return false
}

func parseField(text string, f field) (uint64, error) {
	var set uint64
	for item := range strings.SplitSeq(text, ",") {
		bitsOf, err := parseItem(item, f)
		if err != nil {
			return 0, err
		}
		set |= bitsOf
	}
	return set, nil
}

func parseItem(item string, f field) (uint64, error) {
	if item == "" {
		return 0, errors.New("empty list item")
	}
	rng, stepText, hasStep := strings.Cut(item, "/")
	step := 1
	if hasStep {
		n, err := strconv.Atoi(stepText)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("step %q must be a positive number", stepText)
		}
		step = n
	}
	lo, hi := f.min, f.max
	switch {
	case rng == "*":
		if f.max == 7 {
			hi = 6 // * is each day once, not Sunday twice
		}
	case strings.Contains(rng, "-"):
		a, b, _ := strings.Cut(rng, "-")
		var err error
		if lo, err = value(a, f); err != nil {
			return 0, err
		}
		if hi, err = value(b, f); err != nil {
			return 0, err
		}
		if lo > hi {
			return 0, fmt.Errorf("range %s runs backwards: write the lower bound first", rng)
		}
	default:
		v, err := value(rng, f)
		if err != nil {
			return 0, err
		}
		lo, hi = v, v
		if hasStep {
			hi = f.max // a/n: from a to the end, every n
		}
	}
	var set uint64
	for v := lo; v <= hi; v += step {
		set |= 1 << v
	}
	return set, nil
}

func value(text string, f field) (int, error) {
	for i, n := range f.names {
		if strings.EqualFold(text, n) {
			return f.min + i, nil
		}
	}
	v, err := strconv.Atoi(text)
	if err != nil {
		if f.names != nil {
			return 0, fmt.Errorf("%q is neither a number %d-%d nor a name %s-%s", text, f.min, f.max, f.names[0], f.lastName)
		}
		if strings.ContainsAny(text, "?LW#") {
			return 0, fmt.Errorf("%q: the Quartz forms ? L W # are not supported", text)
		}
		return 0, fmt.Errorf("%q is not a number %d-%d", text, f.min, f.max)
	}
	if v < f.min || v > f.max {
		return 0, fmt.Errorf("%d is out of range %d-%d", v, f.min, f.max)
	}
	return v, nil
}

func has(set uint64, v int) bool { return set&(1<<v) != 0 }

// dayMatches applies Vixie cron's rule: when both day fields are
// restricted (neither starts with *), a day matching either one matches.
func (s *Schedule) dayMatches(d time.Time) bool {
	if !has(s.month, int(d.Month())) {
		return false
	}
	domOK, dowOK := has(s.dom, d.Day()), has(s.dow, int(d.Weekday()))
	if s.domStar || s.dowStar {
		return domOK && dowOK
	}
	return domOK || dowOK
}

// maxDays bounds the search: the longest wait between two matching days
// is eight years (a 29th of February across a century that skips a leap
// year).
const maxDays = 9 * 366

// Next returns the first time after after at which the schedule fires in
// loc, or the zero time if there is none within nine years (which Parse's
// checks make impossible). See the package comment for how transitions of
// daylight-saving time are handled.
func (s *Schedule) Next(after time.Time, loc *time.Location) time.Time {
	a := after.In(loc)
	// Civil times are counted in UTC, which has no transitions.
	civ := time.Date(a.Year(), a.Month(), a.Day(), a.Hour(), a.Minute(), 0, 0, time.UTC).Add(time.Minute)
	for range maxDays {
		if s.dayMatches(civ) {
			if t, ok := s.nextInDay(civ, after, loc); ok {
				return t
			}
		}
		civ = time.Date(civ.Year(), civ.Month(), civ.Day()+1, 0, 0, 0, 0, time.UTC)
	}
	return time.Time{}
}

// nextInDay finds the first time of the schedule on civ's day, at or after
// civ's hour and minute, whose instant falls after after.
func (s *Schedule) nextInDay(civ, after time.Time, loc *time.Location) (time.Time, bool) {
	for h := civ.Hour(); h < 24; h++ {
		if !has(s.hour, h) {
			continue
		}
		m0 := 0
		if h == civ.Hour() {
			m0 = civ.Minute()
		}
		for m := m0; m < 60; m++ {
			if !has(s.minute, m) {
				continue
			}
			if t := Resolve(civ.Year(), civ.Month(), civ.Day(), h, m, loc); t.After(after) {
				return t, true
			}
		}
	}
	return time.Time{}, false
}

// Resolve is the instant of a wall-clock time in loc under the rule of the
// package comment: a time skipped by a transition is the transition itself
// (the first instant after the gap), and a time that occurs twice is its
// first occurrence.
func Resolve(year int, month time.Month, day, hour, minute int, loc *time.Location) time.Time {
	want := time.Date(year, month, day, hour, minute, 0, 0, time.UTC)
	t := time.Date(year, month, day, hour, minute, 0, 0, loc)
	got := wall(t)
	if got.Equal(want) {
		// An earlier occurrence exists if the zone before t's had a larger
		// offset (the clocks went back) and the time falls in both.
		start, _ := t.ZoneBounds()
		if start.IsZero() {
			return t
		}
		_, offPrev := start.Add(-time.Second).Zone()
		_, offCur := t.Zone()
		if offPrev > offCur {
			if e := t.Add(-time.Duration(offPrev-offCur) * time.Second); e.Before(start) && wall(e).Equal(want) {
				return e.In(loc)
			}
		}
		return t
	}
	// In a gap. time.Date put t in one of the zones around it; the
	// transition is where that zone starts or ends.
	start, end := t.ZoneBounds()
	if got.After(want) {
		return start.In(loc)
	}
	return end.In(loc)
}

// wall is t's wall-clock time, as a UTC time.
func wall(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}
