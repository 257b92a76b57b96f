//! Tests of the configuration: defaults, file and environment layering,
//! and the validation of each section.

use super::*;

fn env_of(pairs: &[(&str, &str)]) -> Env {
    // figment's Env reads the process environment; tests use a unique
    // prefix so they do not see each other's variables.
    let prefix = format!("STOKERTEST{}_", std::process::id());
    for (k, v) in pairs {
        // SAFETY: tests in this module do not read these vars concurrently
        // with other threads writing them: each name is unique to this test.
        unsafe { std::env::set_var(format!("{prefix}{k}"), v) };
    }
    Config::env(&prefix)
}

#[test]
fn layers_file_env_flags() {
    let dir = std::env::temp_dir().join(format!("stoker-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("c.toml");
    std::fs::write(
        &f,
        "listen = \"127.0.0.1:9000\"\nshutdown_timeout_secs = 5\n[engine]\nmax_num_seqs = 8\nattention_order = \"reference\"\n[admission]\nmax_waiting_requests = 3\n",
    )
    .unwrap();
    let env = env_of(&[
        ("ADMISSION__MAX_WAITING_REQUESTS", "7"),
        // Not configuration: ignored, not an unknown-key error.
        ("CONFIG", "elsewhere.toml"),
        ("TEST_THREADS", "2"),
    ]);
    let c = Config::load_from(
        Some(&f),
        env,
        &Overrides {
            shutdown_timeout_secs: Some(9),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(c.listen.port(), 9000);
    assert_eq!(c.engine.max_num_seqs, 8);
    assert_eq!(
        c.engine_config().attention_order,
        stoker_executor::AttentionOrder::Reference
    );
    assert_eq!(
        Config::default().engine_config().attention_order,
        stoker_executor::AttentionOrder::Position
    );
    assert_eq!(c.admission.max_waiting_requests, 7, "env beats file");
    assert_eq!(c.shutdown_timeout_secs, 9, "flag beats file");
    assert_eq!(c.model_id(), "SmolLM2-135M-Instruct.Q4_1");
}

#[test]
fn refuses_public_listen_without_keys() {
    let o = Overrides {
        listen: Some("0.0.0.0:8080".parse().unwrap()),
        ..Default::default()
    };
    let e = Config::load_from(None, env_of(&[]), &o).unwrap_err();
    assert!(matches!(e, ConfigError::InsecureListen(_)), "{e}");
    let o = Overrides {
        insecure: true,
        ..o
    };
    Config::load_from(None, env_of(&[]), &o).unwrap();
}

#[test]
fn unknown_and_malformed_keys_are_errors() {
    let dir = std::env::temp_dir().join(format!("stoker-cfg2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bad.toml");
    std::fs::write(&f, "lisen = \"127.0.0.1:1\"\n").unwrap();
    let e = Config::load_from(Some(&f), env_of(&[]), &Overrides::default()).unwrap_err();
    assert!(e.to_string().contains("lisen"), "{e}");
    std::fs::write(&f, "[engine]\nmax_num_seqs = \"many\"\n").unwrap();
    assert!(Config::load_from(Some(&f), env_of(&[]), &Overrides::default()).is_err());
    std::fs::write(&f, "[engine]\nattention_order = \"fastest\"\n").unwrap();
    let e = Config::load_from(Some(&f), env_of(&[]), &Overrides::default()).unwrap_err();
    assert!(e.to_string().contains("fastest"), "{e}");
    std::fs::write(
        &f,
        "[[api_keys]]\nkey = \"\"\ntenant = \"t\"\nscopes = [\"inference\"]\n",
    )
    .unwrap();
    assert!(Config::load_from(Some(&f), env_of(&[]), &Overrides::default()).is_err());
    for (bad, says) in [
        ("executor_slots = 0", "kafka.executor_slots = 0"),
        ("api_slots = 1000\nexecutor_slots = 66", "\"shared\""),
        ("layout = \"shared\"\napi_slots = 1025", "at most 1024"),
        ("layout = \"ring\"", "ring"),
    ] {
        std::fs::write(&f, format!("[kafka]\n{bad}\n")).unwrap();
        let e = Config::load_from(Some(&f), env_of(&[]), &Overrides::default()).unwrap_err();
        assert!(e.to_string().contains(says), "{bad}: {e}");
    }
    std::fs::write(&f, "[kafka]\nexecutor_slots = 4096\napi_slots = 1024\n").unwrap();
    let env = env_of(&[("KAFKA__LAYOUT", "shared")]);
    let c = Config::load_from(Some(&f), env, &Overrides::default());
    // SAFETY: as in `env_of`; no other test reads this name.
    unsafe { std::env::remove_var(format!("STOKERTEST{}_KAFKA__LAYOUT", std::process::id())) };
    assert_eq!(c.unwrap().kafka.layout, TransportLayout::Shared, "env");
    assert_eq!(Config::default().kafka.layout, TransportLayout::Pairwise);
    assert_eq!(Config::default().kafka.routing, Routing::PowerOfThree);
    std::fs::write(&f, "[kafka]\nrouting = \"power_of_two\"\n").unwrap();
    let c = Config::load_from(Some(&f), env_of(&[]), &Overrides::default()).unwrap();
    assert_eq!(c.kafka.routing, Routing::PowerOfTwo);
    std::fs::write(&f, "[kafka]\nrouting = \"max_headroom\"\n").unwrap();
    let c = Config::load_from(Some(&f), env_of(&[]), &Overrides::default()).unwrap();
    assert_eq!(c.kafka.routing, Routing::MaxHeadroom);
    std::fs::write(&f, "[kafka]\nrouting = \"random\"\n").unwrap();
    let e = Config::load_from(Some(&f), env_of(&[]), &Overrides::default()).unwrap_err();
    assert!(e.to_string().contains("random"), "{e}");
    for bad in [
        "itl_target_factor = 0.5",
        "itl_target_ms = -1.0",
        "batch_step_target_ms = nan",
        "batch_step_beside_chat_ms = -5.0",
    ] {
        std::fs::write(&f, format!("[engine]\n{bad}\n")).unwrap();
        let e = Config::load_from(Some(&f), env_of(&[]), &Overrides::default()).unwrap_err();
        assert!(e.to_string().contains("engine.itl_target"), "{bad}: {e}");
    }
    std::fs::write(
        &f,
        "[engine]\nitl_target_ms = 25.0\nmin_prefill_chunk = 8\n",
    )
    .unwrap();
    let c = Config::load_from(Some(&f), env_of(&[]), &Overrides::default()).unwrap();
    assert_eq!(c.engine_config().planner.interactive_itl_ms, 25.0);
    assert_eq!(c.engine_config().planner.min_prefill_chunk, 8);
    let missing = dir.join("nope.toml");
    assert!(Config::load_from(Some(&missing), env_of(&[]), &Overrides::default()).is_err());
}
