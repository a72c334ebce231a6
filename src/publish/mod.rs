//! Successor publication for refresh jobs (in progress).
