//! The web console (docs/console.md): one HTML page, its script and its style sheet, built
//! into the binary and served by the admin listener. The page reads the same JSON and
//! metrics the admin API serves; these routes add no state and answer static bytes only.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

/// Every asset: (file name under /console/, content type, bytes).
const ASSETS: &[(&str, &str, &str)] = &[
    ("index.html", "text/html; charset=utf-8", include_str!("../console/index.html")),
    ("console.js", "text/javascript; charset=utf-8", include_str!("../console/console.js")),
    ("console.css", "text/css; charset=utf-8", include_str!("../console/console.css")),
];

/// Adds the console's routes: `/` and `/console` redirect to `/console/`, the page;
/// `/console/{file}` serves the assets.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    router
        .route("/", get(|| async { Redirect::temporary("/console/") }))
        .route("/console", get(|| async { Redirect::temporary("/console/") }))
        .route("/console/", get(|| async { serve("index.html") }))
        .route("/console/{file}", get(|Path(file): Path<String>| async move { serve(&file) }))
}

fn asset(name: &str) -> Option<(&'static str, &'static str)> {
    ASSETS.iter().find(|(n, _, _)| *n == name).map(|&(_, kind, body)| (kind, body))
}

fn serve(name: &str) -> Response {
    match asset(name) {
        Some((kind, body)) => (
            [
                (header::CONTENT_TYPE, kind),
                (header::CACHE_CONTROL, "no-cache"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            body,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such console file\n").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_the_page_names_is_served() {
        let (kind, page) = asset("index.html").unwrap();
        assert!(kind.starts_with("text/html"));
        for name in ["console.js", "console.css"] {
            assert!(page.contains(&format!("/console/{name}")), "{name} not linked");
            assert!(asset(name).is_some(), "{name} not served");
        }
        assert!(asset("../lib.rs").is_none());
        assert_eq!(serve("nope").status(), StatusCode::NOT_FOUND);
        let ok = serve("console.js");
        assert_eq!(ok.headers()[header::CACHE_CONTROL], "no-cache");
        assert_eq!(ok.headers()[header::CONTENT_TYPE], "text/javascript; charset=utf-8");
    }

    #[test]
    fn the_script_never_assigns_markup() {
        let (_, js) = asset("console.js").unwrap();
        assert!(!js.contains("innerHTML") && !js.contains("outerHTML") && !js.contains("insertAdjacentHTML"));
    }
}
