//! DefaultBinder: binds the pod through `pods/binding`, by way of the
//! scheduler's [`Binder`].

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use crate::framework::{Binder, Plugin, PodInfo, Point, Status};

pub const NAME: &str = "DefaultBinder";

pub struct DefaultBinder;

pub fn new(args: &Value) -> Result<Arc<dyn Plugin>, String> {
    super::no_args(NAME, args)?;
    Ok(Arc::new(DefaultBinder))
}

impl Plugin for DefaultBinder {
    fn name(&self) -> &'static str {
        NAME
    }

    fn points(&self) -> &'static [Point] {
        &[Point::Bind]
    }

    fn bind<'a>(
        &'a self,
        binder: &'a dyn Binder,
        pod: &'a PodInfo,
        node: &'a str,
    ) -> BoxFuture<'a, Status> {
        Box::pin(async move {
            match binder.bind(pod, node).await {
                Ok(()) => Status::success(),
                Err(error) => Status::error(error),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    use super::*;
    use crate::framework::Code;

    /// Records bindings; refuses node "gone".
    #[derive(Default)]
    struct FakeBinder {
        bound: Mutex<Vec<(String, String)>>,
    }

    impl Binder for FakeBinder {
        fn bind<'a>(
            &'a self,
            pod: &'a PodInfo,
            node: &'a str,
        ) -> BoxFuture<'a, Result<(), String>> {
            Box::pin(async move {
                if node == "gone" {
                    return Err(format!("nodes \"{node}\" not found"));
                }
                self.bound
                    .lock()
                    .unwrap()
                    .push((pod.key.clone(), node.to_string()));
                Ok(())
            })
        }
    }

    fn pod() -> PodInfo {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        }))
        .unwrap();
        PodInfo::new(Arc::new(pod))
    }

    #[test]
    fn binds_through_the_binder() {
        let binder = FakeBinder::default();
        let pod = pod();
        let status = futures::executor::block_on(DefaultBinder.bind(&binder, &pod, "n1"));
        assert!(status.is_success());
        assert_eq!(
            *binder.bound.lock().unwrap(),
            vec![("ns/p".to_string(), "n1".to_string())]
        );
        let status = futures::executor::block_on(DefaultBinder.bind(&binder, &pod, "gone"));
        assert_eq!(status.code, Code::Error);
        assert_eq!(status.reasons[..], vec!["nodes \"gone\" not found"]);
        assert_eq!(binder.bound.lock().unwrap().len(), 1);
    }
}
