-- Exclusion calendars (calendars.put): a job whose `exclude` names one
-- records its instants on the calendar's dates as skipped. `body` is the
-- calendar as the API writes it (id, dates, weekdays); it is read whole
-- whenever a due job excluding it is staged, so an edit applies to every
-- instant not yet staged.
CREATE TABLE calendars (
    id TEXT PRIMARY KEY,
    body TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);
