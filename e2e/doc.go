// Package e2e holds end-to-end tests that run choird, a real Postgres and
// choir-agent together in one process, against local servers that speak the
// real wire protocols of the outside services.
package e2e
