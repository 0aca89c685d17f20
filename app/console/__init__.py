"""The web console at /console (issue 21): server-rendered pages over the service's own API.

Each page asks the `/v1` API in process, as the signed-in key (app/console/api.py), so the
console can do exactly what that key can do through curl, with the same checks, errors and
audit events; it adds sessions, CSRF tokens and HTML, nothing else.
"""
