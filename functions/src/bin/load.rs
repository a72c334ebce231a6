//! placeholder until the Lambda functions land
fn main() {}
