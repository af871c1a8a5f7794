//! `tcpstall completions` and `tcpstall man`: generated from the command-line definition
//! itself, so they always match the flags.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use clap_complete::Shell;
use tcpstall_core::output::OutputDir;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ShellName {
    Bash,
    Zsh,
    Fish,
    Elvish,
    Powershell,
}

#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_name = "SHELL")]
    shell: ShellName,
}

#[derive(Args)]
pub struct ManArgs {
    /// Write tcpstall.1 and one page per command (tcpstall-analyze.1, ...) into this
    /// directory instead of printing tcpstall.1
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

pub fn completions(args: &CompletionsArgs, mut command: clap::Command) -> Result<(), String> {
    let shell = match args.shell {
        ShellName::Bash => Shell::Bash,
        ShellName::Zsh => Shell::Zsh,
        ShellName::Fish => Shell::Fish,
        ShellName::Elvish => Shell::Elvish,
        ShellName::Powershell => Shell::PowerShell,
    };
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "tcpstall", &mut out);
    write_stdout(&out)
}

pub fn man(args: &ManArgs, command: clap::Command) -> Result<(), String> {
    let Some(dir) = &args.dir else {
        let mut out = Vec::new();
        clap_mangen::Man::new(command)
            .render(&mut out)
            .map_err(|e| format!("rendering the manual page: {e}"))?;
        return write_stdout(&out);
    };
    crate::outputs::check(&[crate::outputs::Output::directory("--dir", dir)], &[])?;
    if !dir.is_dir() {
        return Err(format!("{}: not a directory", dir.display()));
    }
    // Each page written whole, never through a link (`tcpstall_core::output`).
    let out = OutputDir::open(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut command = command.disable_help_subcommand(true);
    command.build();
    let mut pages = Vec::new();
    write_pages(&command, &out, &mut pages)?;
    pages.sort();
    eprintln!(
        "tcpstall: wrote {} manual pages into {}: {}",
        pages.len(),
        dir.display(),
        pages.join(", ")
    );
    Ok(())
}

/// The page of `command` and of each of its visible subcommands, as `clap_mangen`'s
/// `generate_to` names them, each written into `out`; their names added to `pages`.
fn write_pages(
    command: &clap::Command,
    out: &OutputDir,
    pages: &mut Vec<String>,
) -> Result<(), String> {
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, out, pages)?;
    }
    let man = clap_mangen::Man::new(command.clone());
    let name = man.get_filename();
    let mut page = Vec::new();
    man.render(&mut page)
        .map_err(|e| format!("rendering the manual page: {e}"))?;
    out.write(name.as_ref(), &page)
        .map_err(|e| format!("{}: {e}", out.path().join(&name).display()))?;
    pages.push(name);
    Ok(())
}

fn write_stdout(bytes: &[u8]) -> Result<(), String> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(format!("writing to standard output: {e}"))
        }
        _ => Ok(()),
    }
}
