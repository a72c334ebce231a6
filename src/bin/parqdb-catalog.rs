//! The `parqdb-catalog` command.
fn main() -> std::process::ExitCode {
    parqdb_catalog::run_command()
}
