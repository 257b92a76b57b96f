//! The transport against a real broker (`tansu`) that restarts without its
//! log: the topics must come back with the layout's partition counts, not
//! with whatever the broker would make on its own.

use std::time::Duration;

use stoker_controlplane::transport::{Kafka, KafkaSettings};

use crate::cluster::Broker;

/// Regression: a producer asks the broker to create a topic it refreshes
/// metadata for, so after a restart the broker made `stoker.capacity` with
/// its default 4 partitions before the healer could make it with 16, and
/// the cluster stayed `not_ready` for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_broker_gets_the_layouts_topics_and_none_of_its_own() {
    let mut broker = Broker::start();
    let kafka = Kafka::connect(KafkaSettings::new(broker.addr())).expect("connect");
    let topics = kafka.topics().clone();

    // A topic no one created is not made by sending to it.
    let err = kafka
        .send("stoker.nobody-made-this", Some(0), "k", b"x")
        .await
        .expect_err("a send to a missing topic");
    assert!(!kafka.healthy(), "a failed send marks trouble: {err}");
    let k = kafka.clone();
    let missing = tokio::task::spawn_blocking(move || k.partition_count("stoker.nobody-made-this"))
        .await
        .unwrap();
    assert!(missing.is_err(), "the broker made the topic: {missing:?}");

    kafka.ensure_topics().await.expect("create the topics");
    kafka.heal().await;
    assert!(kafka.healthy(), "topics in place after heal");
    kafka
        .send(
            &topics.capacity,
            Some(topics.capacity_partition(3)),
            "k",
            b"x",
        )
        .await
        .expect("send to the capacity topic");

    // The broker restarts empty; the producer keeps refreshing the metadata
    // of the topics it knows (every 2 s) while nothing heals yet.
    broker.restart();
    tokio::time::sleep(Duration::from_secs(6)).await;

    kafka
        .ensure_topics()
        .await
        .expect("the topics come back with the layout's partition counts");
    for (topic, need) in topics.layout() {
        let k = kafka.clone();
        let t = topic.to_string();
        let have = tokio::task::spawn_blocking(move || k.partition_count(&t))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{topic}: {e}"));
        assert_eq!(have, need, "{topic}");
    }
}
