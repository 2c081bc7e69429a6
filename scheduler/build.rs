//! `sqlx::migrate!` embeds the migrations directory at compile time, and
//! cargo does not watch it: without this, adding a migration and nothing
//! else would leave the store's binaries without it.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
