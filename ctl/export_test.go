package ctl

// StartChoirdOn runs choird on the migrated database behind url for the
// external tests, and returns its .choir.d.
var StartChoirdOn = startChoirdOn
