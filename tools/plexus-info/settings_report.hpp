// plexus-info --settings: every PLEXUS_* setting of the table with its value
// here and where the value came from, and --settings=markdown: the table of
// docs/environment.md (scripts/environment-doc.sh writes it there).
#pragma once

namespace plexus::info {

// Prints every setting: name, value, source (environment or default), the
// layer that reads it; then each unknown PLEXUS_* variable with the nearest
// known name. Returns 0.
int PrintSettings();

// Prints the Markdown table of every setting (docs/environment.md's).
int PrintSettingsMarkdown();

}  // namespace plexus::info
