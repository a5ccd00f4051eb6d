//! Missing and wrong keys get 401 and reach no replica; either header form works.

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_wrong_keys_are_refused_before_any_replica() {
    let replica = MockReplica::start().await;
    let (running, client) = gateway(&config(&[&replica], "{}", "")).await;
    wait_ready(&running, "m", 1).await;
    let body = completion_body("hello", 4);

    let missing = client.post("/v1/completions", None, &body).await;
    assert_eq!(missing.status, 401);
    assert_eq!(missing.json()["error"]["code"], "invalid_api_key");
    let wrong = client.post("/v1/completions", Some("key-b"), &body).await;
    assert_eq!(wrong.status, 401);
    let x_api_key = client
        .send(
            "POST",
            "/v1/completions",
            &[("content-type", "application/json"), ("x-api-key", "nope")],
            body.to_string(),
        )
        .await;
    assert_eq!(x_api_key.status, 401);
    assert_eq!(
        replica.requests(),
        0,
        "a refused request reached the replica"
    );

    let ok = client
        .send(
            "POST",
            "/v1/completions",
            &[("content-type", "application/json"), ("x-api-key", "key-a")],
            body.to_string(),
        )
        .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(
        client
            .post("/v1/completions", Some("key-a"), &body)
            .await
            .status,
        200
    );
    assert_eq!(replica.requests(), 2);
    // The tenant's key is not forwarded to the engine.
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_access_only_when_configured() {
    let replica = MockReplica::start().await;
    let yaml = config(&[&replica], "{}", "") + "anonymous: team-a\n";
    let (running, client) = gateway(&yaml).await;
    wait_ready(&running, "m", 1).await;
    let ok = client
        .post("/v1/completions", None, &completion_body("hi", 2))
        .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    // A key that is present but wrong is still refused.
    assert_eq!(
        client
            .post("/v1/completions", Some("bad"), &completion_body("hi", 2))
            .await
            .status,
        401
    );
    running.shutdown().await.expect("clean shutdown");
}

/// `anonymous_any_key` (what `tokenscale up` runs with): any key is the anonymous tenant's,
/// as a local server without keys takes any (the official clients always send one); a
/// malformed credential is still refused, and the flag without `anonymous` is a config error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_key_is_the_anonymous_tenants_when_configured() {
    let replica = MockReplica::start().await;
    let yaml = config(&[&replica], "{}", "") + "anonymous: team-a\nanonymous_any_key: true\n";
    let (running, client) = gateway(&yaml).await;
    wait_ready(&running, "m", 1).await;
    for key in [Some("EMPTY"), Some("key-a"), None] {
        let reply = client
            .post("/v1/completions", key, &completion_body("hi", 2))
            .await;
        assert_eq!(reply.status, 200, "{key:?}: {}", reply.body);
    }
    let basic = client
        .send(
            "POST",
            "/v1/completions",
            &[
                ("content-type", "application/json"),
                ("authorization", "Basic dXNlcjpwYXNz"),
            ],
            completion_body("hi", 2).to_string(),
        )
        .await;
    assert_eq!(basic.status, 401, "{}", basic.body);
    running.shutdown().await.expect("clean shutdown");

    let without_anonymous = config(&[&replica], "{}", "") + "anonymous_any_key: true\n";
    let error = tokenscale_gateway::config::Config::from_yaml(&without_anonymous)
        .expect_err("needs anonymous");
    assert!(
        error
            .to_string()
            .contains("anonymous_any_key needs `anonymous:`"),
        "{error}"
    );
}
