mod common;
use common::llama::*;
use std::time::Duration;

#[test]
fn trace_block() {
    let gen = Gen::Current;
    let Some((_serial, prefix, model, so)) = prerequisites("trace", gen) else {
        return;
    };
    let scratch = tempfile::tempdir().expect("scratch");
    let peers = [
        RpcPeer::start(gen, &prefix, scratch.path()),
        RpcPeer::start(gen, &prefix, scratch.path()),
    ];
    let launch = Launch {
        preload: Some(&so),
        small_batches: false,
        env: vec![],
        args: rpc_split_args(&peers),
    };
    let server = LlamaServer::start(&prefix, &model, scratch.path(), &launch);
    let dir = scratch.path().join("segments");
    complete(&server.base, request(&long_prompt(), 1, 0)).expect("warm");
    let r = hydra_layout::SegmentReader::open_engine(&dir, ENGINE).expect("segment");
    for round in 0..2u64 {
        let base = server.base.clone();
        let prompt = format!("Story {round}. {}", long_prompt());
        let work = std::thread::spawn(move || complete(&base, request(&prompt, 4, 0)));
        let t0 = std::time::Instant::now();
        while r.slot(0).unwrap().state.work_done == 0
            || r.slot(0).unwrap().state.phase != hydra_layout::Phase::Prefill
        {
            assert!(t0.elapsed() < Duration::from_secs(60));
            std::thread::sleep(Duration::from_millis(20));
        }
        peers[1].signal(libc::SIGSTOP);
        for i in 0..14 {
            let s = r.slot(0).unwrap();
            eprintln!(
                "round {round} t={i} step_start={} size={} wait={:?} done={}",
                s.state.step_start_ns,
                s.state.step_size,
                s.wait(),
                s.state.work_done
            );
            std::thread::sleep(Duration::from_secs(1));
        }
        let s = r.slot(0).unwrap();
        if s.wait().is_none() {
            let out = std::process::Command::new("gdb")
                .args([
                    "-p",
                    &server.child.id().to_string(),
                    "-batch",
                    "-ex",
                    "thread apply all bt 25",
                ])
                .output()
                .unwrap();
            eprintln!(
                "GDB round {round}:\n{}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        peers[1].signal(libc::SIGCONT);
        work.join().unwrap().unwrap();
    }
}
