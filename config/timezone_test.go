package config_test

import (
	"testing"

	"github.com/choirhq/choir/config"
)

// TestValidateTimeZone checks a DM's time_zone: an IANA name is accepted,
// an empty one means UTC, and anything else is refused at its path with
// names to use instead.
func TestValidateTimeZone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		zone string
		want []string
	}{
		{"Europe/Berlin", nil},
		{"", nil},
		{"UTC", nil},
		{"Europe/Berln", []string{`$.dms["user-dm"].time_zone: unknown time zone "Europe/Berln": use an IANA name such as "Europe/Berlin", "America/New_York" or "UTC"`}},
		{"Local", []string{`$.dms["user-dm"].time_zone: unknown time zone "Local": use an IANA name such as "Europe/Berlin", "America/New_York" or "UTC"`}},
		{"+02:00", []string{`$.dms["user-dm"].time_zone: unknown time zone "+02:00": use an IANA name such as "Europe/Berlin", "America/New_York" or "UTC"`}},
	} {
		c, s := specConfig(t), specSecrets()
		d := c.DMs["user-dm"]
		d.TimeZone = tc.zone
		c.DMs["user-dm"] = d
		err := c.Validate(s)
		if tc.want == nil {
			if err != nil {
				t.Errorf("time_zone %q: %v", tc.zone, err)
			}
			continue
		}
		checkProblems(t, problems(t, err), tc.want)
	}
	if z := (config.DM{}).Zone(); z != "UTC" {
		t.Errorf("zone of a DM without time_zone = %q, want UTC", z)
	}
}
