"""Meeting scheduling across calendars: place a sequence of meetings on one day so that every
attendee is inside their (time-zone shifted) working hours, free, out of lunch, with buffers,
in the smallest suitable free room; harder tasks add a team representative to pick.

Public API: ``envgym.envs.meeting_scheduling.build.build_bundle`` (docs/SYNTHESIS.md).
"""
