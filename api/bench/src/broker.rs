//! `stoker bench broker`: what one Kafka hop costs on a given broker, with
//! the very client settings the distributed mode uses.
//!
//! A first token crosses the broker twice (the job to the executor, the
//! delta back), so twice the hop latency measured here is the floor of what
//! the distributed mode adds to TTFT over `stoker serve`; the rest is ours.
//! Each probe is one message produced to a fresh topic and timed until the
//! consumer of that partition returns it; probes are spaced so each meets an
//! idle consumer, as a first token does.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use stoker_controlplane::transport::{Kafka, KafkaSettings, Topics};

use super::stats::Dist;

#[derive(Args, Debug)]
pub struct BrokerArgs {
    /// `host:port[,host:port]` of the broker.
    #[arg(long)]
    pub brokers: String,
    /// Probes to time (1..=100000).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub messages: u32,
    /// Pause between probes, in milliseconds (0..=10000).
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub interval_ms: u64,
    /// The consumer's `fetch.wait.max.ms` (as `kafka.fetch_wait_ms`; 0..=10000).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub fetch_wait_ms: u32,
    /// Write the figures as JSON here.
    #[arg(long)]
    pub save: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
pub struct BrokerReport {
    pub brokers: String,
    pub messages: u32,
    pub fetch_wait_ms: u32,
    /// Produce until the consumer returned the message.
    pub hop_ms: Dist,
    /// Produce until the broker acknowledged it.
    pub ack_ms: Dist,
}

pub async fn run(args: BrokerArgs) -> ExitCode {
    match measure(&args).await {
        Ok(r) => {
            println!(
                "broker {}: {} probes, fetch.wait.max.ms {}",
                r.brokers, r.messages, r.fetch_wait_ms
            );
            for (name, d) in [
                ("produce -> consume", &r.hop_ms),
                ("produce -> ack", &r.ack_ms),
            ] {
                println!(
                    "  {name:<18} p50 {:6.2} ms  p95 {:6.2} ms  p99 {:6.2} ms  max {:6.2} ms",
                    d.p50, d.p95, d.p99, d.max
                );
            }
            println!(
                "  a first token crosses two hops: at least {:.2} ms (p50) over an in-process engine",
                2.0 * r.hop_ms.p50
            );
            if let Some(path) = &args.save {
                let body = serde_json::to_string_pretty(&r).expect("plain figures");
                if let Err(e) = std::fs::write(path, body) {
                    eprintln!("stoker bench broker: writing {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("stoker bench broker: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn measure(args: &BrokerArgs) -> anyhow::Result<BrokerReport> {
    // Topics of our own, so the probe never meets a cluster's traffic.
    let base = format!(
        "stoker-bench-{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    let topics = Topics {
        interactive: format!("{base}.hop"),
        replies: format!("{base}.replies"),
        control: format!("{base}.control"),
        capacity: format!("{base}.capacity"),
        executor_slots: 1,
        api_slots: 1,
        ..Topics::default()
    };
    let mut settings = KafkaSettings::new(args.brokers.clone());
    settings.topics = topics.clone();
    settings.produce_timeout = Duration::from_secs(5);
    settings.fetch_wait_ms = args.fetch_wait_ms;
    let kafka = Kafka::connect(settings)?;
    tokio::time::timeout(Duration::from_secs(30), kafka.ensure_topics())
        .await
        .map_err(|_| anyhow::anyhow!("no answer from {} within 30 s", args.brokers))??;
    let k = kafka.clone();
    let topic = topics.interactive.clone();
    let mut rx =
        tokio::task::spawn_blocking(move || k.assign_from_end(&topic, &[0], "stoker-bench"))
            .await??;
    let mut hops = Vec::with_capacity(args.messages as usize);
    let mut acks = Vec::with_capacity(args.messages as usize);
    // One unmeasured probe: connections and metadata are warm afterwards.
    for i in 0..=args.messages {
        let payload = i.to_string().into_bytes();
        let t0 = Instant::now();
        let send = {
            let k = kafka.clone();
            let topic = topics.interactive.clone();
            let payload = payload.clone();
            tokio::spawn(async move {
                k.send(&topic, Some(0), "probe", &payload).await?;
                Ok::<_, anyhow::Error>(t0.elapsed())
            })
        };
        let got = loop {
            let m = tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .map_err(|_| anyhow::anyhow!("probe {i} was not consumed within 10 s"))??;
            // Older messages (a re-read from an approximate watermark) are skipped.
            if m == payload {
                break t0.elapsed();
            }
        };
        let ack = send.await??;
        if i > 0 {
            hops.push(got.as_secs_f64() * 1000.0);
            acks.push(ack.as_secs_f64() * 1000.0);
        }
        tokio::time::sleep(Duration::from_millis(args.interval_ms)).await;
    }
    Ok(BrokerReport {
        brokers: args.brokers.clone(),
        messages: args.messages,
        fetch_wait_ms: args.fetch_wait_ms,
        hop_ms: Dist::of(hops).expect("at least one probe"),
        ack_ms: Dist::of(acks).expect("at least one probe"),
    })
}
