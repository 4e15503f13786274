//! Services' cluster IPs and node ports with the real kubectl against
//! `skiff up`: allocated from the ranges, requested ones honoured or
//! refused with Kubernetes' messages, given back on delete, never handed
//! out twice (also across a SIGKILL and restart); and the `kubernetes`
//! Service at the range's first address with the API server's address in
//! its Endpoints.

use std::net::Ipv4Addr;

use anyhow::{ensure, Result};
use skiff_tests::api_server::with_kubectl;

fn in_default_range(ip: &str) -> bool {
    ip.parse::<Ipv4Addr>()
        .is_ok_and(|ip| u32::from(ip) >> 20 == u32::from(Ipv4Addr::new(10, 96, 0, 0)) >> 20)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_get_addresses_that_are_never_handed_out_twice() -> Result<()> {
    let Some((mut server, kubectl)) =
        with_kubectl("services_get_addresses_that_are_never_handed_out_twice").await?
    else {
        return Ok(());
    };
    let get = |kind: &str, name: &str, path: &str| {
        kubectl.ok(&["get", kind, name, "-o", &format!("jsonpath={path}")])
    };
    // The kubernetes Service, and this API server behind it.
    let mut kubernetes = String::new();
    for _ in 0..100 {
        kubernetes = get(
            "service",
            "kubernetes",
            "{.spec.clusterIP} {.spec.ports[0].port}",
        )
        .unwrap_or_default();
        if !kubernetes.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(kubernetes, "10.96.0.1 443");
    let api = server.http()?.authority().to_string();
    let (ip, port) = api.rsplit_once(':').unwrap_or_default();
    assert_eq!(
        get(
            "endpoints",
            "kubernetes",
            "{.subsets[0].addresses[0].ip}:{.subsets[0].ports[0].port}"
        )?,
        format!("{ip}:{port}")
    );

    // Allocated, requested, refused.
    kubectl.ok(&["create", "deployment", "web", "--image=nginx"])?;
    kubectl.ok(&["expose", "deployment", "web", "--port=80"])?;
    let web = get("service", "web", "{.spec.clusterIP}")?;
    ensure!(
        in_default_range(&web) && web != "10.96.0.1",
        "web got {web:?}"
    );
    ensure!(
        get(
            "service",
            "web",
            "{.spec.clusterIPs[0]} {.spec.ipFamilies[0]}"
        )? == format!("{web} IPv4")
    );
    kubectl.ok(&[
        "create",
        "service",
        "clusterip",
        "fixed",
        "--tcp=80:8080",
        "--clusterip=10.96.0.50",
    ])?;
    assert_eq!(get("service", "fixed", "{.spec.clusterIP}")?, "10.96.0.50");
    let taken = kubectl.fails(&[
        "create",
        "service",
        "clusterip",
        "copy",
        "--tcp=80:8080",
        "--clusterip=10.96.0.50",
    ])?;
    ensure!(
        taken.contains("spec.clusterIPs: Invalid value: []string{\"10.96.0.50\"}: failed to allocate IP 10.96.0.50: provided IP is already allocated"),
        "{taken}"
    );
    let outside = kubectl.fails(&[
        "create",
        "service",
        "clusterip",
        "copy",
        "--tcp=80:8080",
        "--clusterip=192.168.0.9",
    ])?;
    ensure!(
        outside.contains("the provided IP (192.168.0.9) is not in the valid range. The range of valid IPs is 10.96.0.0/12"),
        "{outside}"
    );
    kubectl.ok(&[
        "create",
        "service",
        "nodeport",
        "np",
        "--tcp=80:8080",
        "--node-port=30080",
    ])?;
    assert_eq!(get("service", "np", "{.spec.ports[0].nodePort}")?, "30080");
    let port_taken = kubectl.fails(&[
        "create",
        "service",
        "nodeport",
        "np2",
        "--tcp=80:8080",
        "--node-port=30080",
    ])?;
    ensure!(
        port_taken.contains(
            "spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated"
        ),
        "{port_taken}"
    );
    kubectl.ok(&["create", "service", "nodeport", "auto", "--tcp=80:8080"])?;
    let auto: u16 = get("service", "auto", "{.spec.ports[0].nodePort}")?.parse()?;
    ensure!(
        (30000..=32767).contains(&auto) && auto != 30080,
        "auto got {auto}"
    );
    let headless = kubectl.ok(&[
        "create",
        "service",
        "clusterip",
        "headless",
        "--clusterip=None",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ])?;
    assert_eq!(headless, "None");

    // Given back on delete.
    kubectl.ok(&["delete", "service", "np", "fixed"])?;
    kubectl.ok(&[
        "create",
        "service",
        "nodeport",
        "np2",
        "--tcp=80:8080",
        "--node-port=30080",
    ])?;
    kubectl.ok(&[
        "create",
        "service",
        "clusterip",
        "copy",
        "--tcp=80:8080",
        "--clusterip=10.96.0.50",
    ])?;

    // A restart forgets nothing: what is held stays held.
    server.kill_now();
    server.restart().await?;
    let again = kubectl.fails(&[
        "create",
        "service",
        "clusterip",
        "again",
        "--tcp=80:8080",
        &format!("--clusterip={web}"),
    ])?;
    ensure!(
        again.contains("provided IP is already allocated"),
        "{again}"
    );
    let again = kubectl.fails(&[
        "create",
        "service",
        "nodeport",
        "again",
        "--tcp=80:8080",
        &format!("--node-port={auto}"),
    ])?;
    ensure!(
        again.contains("provided port is already allocated"),
        "{again}"
    );
    assert_eq!(
        get("service", "kubernetes", "{.spec.clusterIP}")?,
        "10.96.0.1"
    );
    Ok(())
}
