//! The Lambda handler layer (in progress).
