package main

// The IANA time zones (serve's --tz, rls' calendar: rules) are in the
// binary itself: the image is FROM scratch, with no /usr/share/zoneinfo.
// The time package still prefers the system's database where there is one.
import _ "time/tzdata"
