//! Regenerates the pictures in docs/images from the shipped captures and the simulator:
//!
//!     cargo run --release -p tcpstall-report --example docs_images
//!
//! Each picture is written as SVG and PNG.

use std::fs::File;
use std::path::Path;
use std::process::ExitCode;

use tcpstall_core::analyze::{AnalyzeOptions, analyze};
use tcpstall_report::analysis::draw;
use tcpstall_report::trace::{self, TraceConfig};
use tcpstall_report::{png, sim};
use tcpstall_sim::ScenarioFile;
use tcpstall_sim::sweep::{SweepSpec, sweep};

fn save(dir: &Path, name: &str, svg: &str) -> Result<(), String> {
    std::fs::write(dir.join(format!("{name}.svg")), svg).map_err(|e| format!("{name}.svg: {e}"))?;
    let png = png::svg_to_png(svg, name, 1.0).map_err(|e| e.to_string())?;
    std::fs::write(dir.join(format!("{name}.png")), png).map_err(|e| format!("{name}.png: {e}"))?;
    println!("wrote {}/{name}.svg and .png", dir.display());
    Ok(())
}

fn capture_pictures(root: &Path, dir: &Path, capture: &str, with_zoom: bool) -> Result<(), String> {
    let path = root.join("captures").join(format!("{capture}.pcap"));
    let open = || File::open(&path).map_err(|e| format!("{}: {e}", path.display()));
    let analysis =
        analyze(open()?, capture, &AnalyzeOptions::default()).map_err(|e| e.to_string())?;
    let config = TraceConfig::default();
    let selected = trace::select_connections(&analysis, 1);
    let traces =
        trace::collect(open()?, &analysis, &selected, &config).map_err(|e| e.to_string())?;
    for g in draw(&analysis, traces) {
        save(dir, &format!("{capture}-sequence"), &g.whole)?;
        if with_zoom && let Some(zoom) = &g.zoom {
            save(dir, &format!("{capture}-zoom"), zoom)?;
        }
        save(dir, &format!("{capture}-round-trips"), &g.histogram)?;
    }
    Ok(())
}

fn run() -> Result<(), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = root.join("docs/images");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    capture_pictures(&root, &dir, "seed002-two-writes", true)?;
    capture_pictures(&root, &dir, "server-sleep-40ms", false)?;

    // Seed 000's sawtooth: 100 kB-ish blocks, classic Nagle and a 200 ms delayed ACK.
    let mut file = ScenarioFile::default();
    file.client.stack = "macos-legacy".into();
    file.server.stack = "macos-legacy".into();
    file.workload.pattern = "bulk".into();
    let spec = SweepSpec::parse("block=92000..108000:100").map_err(|e| e.to_string())?;
    let points = sweep(&file, &spec).map_err(|e| e.to_string())?;
    save(
        &dir,
        "sweep-block-sawtooth",
        &sim::sweep_svg(&spec.parameter, &points),
    )?;
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("docs_images: error: {e}");
            ExitCode::from(2)
        }
    }
}
