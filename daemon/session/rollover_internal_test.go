package session

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/db"
)

// TestNextMidnight checks when a session started at a moment rolls over:
// the next midnight in its DM's zone, across a daylight-saving change and
// on the last day of a year.
func TestNextMidnight(t *testing.T) {
	t.Parallel()
	zone := func(name string) *time.Location {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		return loc
	}
	berlin, auckland := zone("Europe/Berlin"), zone("Pacific/Auckland")
	for _, tc := range []struct {
		name string
		at   time.Time
		loc  *time.Location
		want time.Time
	}{
		{"UTCAfternoon", time.Date(2026, 11, 29, 15, 4, 5, 0, time.UTC), time.UTC, time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)},
		{"JustBeforeMidnight", time.Date(2026, 11, 29, 23, 59, 59, 0, time.UTC), time.UTC, time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)},
		{"AtMidnightIsTheNextOne", time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), time.UTC, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{"ZoneAheadOfUTC", time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), auckland, time.Date(2026, 12, 1, 0, 0, 0, 0, auckland)},
		{"DaylightSavingEnds", time.Date(2026, 10, 25, 12, 0, 0, 0, berlin), berlin, time.Date(2026, 10, 26, 0, 0, 0, 0, berlin)},
		{"NewYear", time.Date(2026, 12, 31, 22, 0, 0, 0, berlin), berlin, time.Date(2027, 1, 1, 0, 0, 0, 0, berlin)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := NextMidnight(tc.at, tc.loc); !got.Equal(tc.want) {
				t.Errorf("NextMidnight(%s, %s) = %s, want %s", tc.at, tc.loc, got, tc.want)
			}
		})
	}
}

// TestBusy checks when a session due to roll over waits: a turn of the
// edge lane, a running core job, a message on its way, or lanes not
// reported yet; finished core jobs and other lanes do not hold it back.
func TestBusy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		lanes   string
		pending bool
		want    string
	}{
		{"Idle", `{"edge":{"lane":"edge","state":"EDGE_IDLE"}}`, false, ""},
		{"FinishedCoreJobsAndSystemLane", `{"edge":{"state":"EDGE_IDLE"},"core:build":{"state":"CORE_COMPLETED"},
			"core:old":{"state":"CORE_TERMINATED"},"system":{"state":"SYSTEM_BUSY"}}`, false, ""},
		{"EdgeInATurn", `{"edge":{"state":"EDGE_WAITING_LLM"}}`, false, "the edge lane is waiting llm"},
		{"CoreJobRunning", `{"edge":{"state":"EDGE_IDLE"},"core:build":{"state":"CORE_REASONING"}}`, false, "core job build is reasoning"},
		{"MessageOnItsWay", `{"edge":{"state":"EDGE_IDLE"}}`, true, "a message is on its way to the agent"},
		{"NotReportedYet", `{}`, false, "the edge lane has not reported yet"},
		{"Unreadable", `[1]`, false, "its lanes' states are unreadable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := busy(db.SessionsRolloverCandidatesRow{LaneStatus: json.RawMessage(tc.lanes), InboxPending: tc.pending})
			if got != tc.want && !(tc.want != "" && strings.HasPrefix(got, tc.want)) {
				t.Errorf("busy = %q, want %q", got, tc.want)
			}
		})
	}
}
