"""Browser tests of the web console (/console), driven through Debian's Chromium."""
