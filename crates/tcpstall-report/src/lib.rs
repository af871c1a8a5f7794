//! Pictures people read at a glance: time-sequence graphs, histograms, the HTML report.
