//! The bounded set of `topic` label values every slice's metrics share.

use std::collections::HashSet;
use std::sync::{Arc, PoisonError, RwLock};

use crate::metrics::OTHER_TOPICS;

/// Which topics get a `topic` label of their own: those a policy rule names or the
/// brokers' Metadata named, up to `[limits] max_topic_labels`; every other topic
/// (client-invented names included) is counted under [`OTHER_TOPICS`], so clients
/// cannot grow the exporter's series without bound. Each label is made once and
/// shared, so labelling a topic allocates nothing.
#[derive(Debug)]
pub(crate) struct TopicLabels {
    cap: usize,
    labelled: RwLock<HashSet<Arc<str>>>,
    other: Arc<str>,
}

impl TopicLabels {
    pub(crate) fn new(cap: usize) -> TopicLabels {
        TopicLabels {
            cap,
            labelled: Default::default(),
            other: Arc::from(OTHER_TOPICS),
        }
    }

    /// Drops the labels of topics `known` no longer names (deleted from the cluster),
    /// so the slots under the cap go to topics that exist. A topic that comes back
    /// gets its label again, its counters going on from where they were.
    pub(crate) fn forget_unknown(&self, known: impl Fn(&str) -> bool) {
        self.labelled
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|topic| known(topic));
    }

    /// The `topic` label of `topic`; `known` says whether a rule or the brokers name it.
    pub(crate) fn label(&self, topic: &str, known: impl FnOnce() -> bool) -> Arc<str> {
        if let Some(label) = self
            .labelled
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(topic)
        {
            return Arc::clone(label);
        }
        if known() {
            let mut labelled = self
                .labelled
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(label) = labelled.get(topic) {
                return Arc::clone(label);
            }
            if labelled.len() < self.cap {
                let label: Arc<str> = Arc::from(topic);
                labelled.insert(Arc::clone(&label));
                return label;
            }
        }
        Arc::clone(&self.other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_topics_get_labels_and_only_up_to_the_cap() {
        let labels = TopicLabels::new(2);
        let label = |topic: &str, known: bool| labels.label(topic, || known).to_string();
        assert_eq!(label("invented-by-a-client", false), OTHER_TOPICS);
        assert_eq!(label("orders", true), "orders");
        assert_eq!(label("payments", true), "payments");
        assert_eq!(label("third", true), OTHER_TOPICS);
        // Labelled topics keep their label without asking again.
        let orders = labels.label("orders", || panic!("asked again"));
        assert_eq!(&*orders, "orders");
        assert!(Arc::ptr_eq(&orders, &labels.label("orders", || true)));
        assert!(Arc::ptr_eq(
            &labels.label("x", || false),
            &labels.label("y", || false)
        ));
    }

    #[test]
    fn a_forgotten_topic_frees_its_slot() {
        let labels = TopicLabels::new(1);
        assert_eq!(&*labels.label("gone", || true), "gone");
        assert_eq!(&*labels.label("new", || true), OTHER_TOPICS);
        labels.forget_unknown(|topic| topic != "gone");
        assert_eq!(&*labels.label("new", || true), "new");
    }
}
