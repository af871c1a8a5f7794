//! Request/response round trips: from a request's first byte to its response's last.
//!
//! A round trip ends where the response ends, not where it starts, so a pause inside
//! the response (a server writing headers and body in two sends, the second held by
//! Nagle) is part of the round trip that suffered it.

use tcpstall_core::segment::Nanos;

/// Follows the turns of one connection's data and yields each round trip.
#[derive(Clone, Copy, Debug, Default)]
pub struct RoundTrips {
    /// First byte of the request being answered.
    request_start: Option<Nanos>,
    /// Last response byte seen so far for that request.
    response_end: Option<Nanos>,
}

impl RoundTrips {
    /// A data segment at `time`, from the client (`from_client`) or the server. Returns
    /// the round trip it closes, `(request start, response end)`: a client's data after
    /// a response starts the next request.
    pub fn data(&mut self, time: Nanos, from_client: bool) -> Option<(Nanos, Nanos)> {
        if from_client {
            let closed = self.take();
            if self.request_start.is_none() {
                self.request_start = Some(time);
            }
            closed
        } else {
            if self.request_start.is_some() {
                self.response_end = Some(time);
            }
            None
        }
    }

    /// The round trip still open at the end of the connection, when it had a response.
    pub fn finish(&mut self) -> Option<(Nanos, Nanos)> {
        self.take()
    }

    fn take(&mut self) -> Option<(Nanos, Nanos)> {
        let end = self.response_end.take()?;
        let start = self.request_start.take()?;
        Some((start, end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_runs_to_the_end_of_its_response() {
        let mut rt = RoundTrips::default();
        // Request in two pieces, response in two sends 40 ms apart (the second held).
        assert_eq!(rt.data(0, true), None);
        assert_eq!(rt.data(100, true), None);
        assert_eq!(rt.data(1_000, false), None);
        assert_eq!(rt.data(41_000_000, false), None);
        // The next request closes the first round trip at the response's last byte.
        assert_eq!(rt.data(41_500_000, true), Some((0, 41_000_000)));
        assert_eq!(rt.data(41_600_000, false), None);
        assert_eq!(rt.finish(), Some((41_500_000, 41_600_000)));
        assert_eq!(rt.finish(), None);
    }

    #[test]
    fn a_request_without_a_response_is_no_round_trip() {
        let mut rt = RoundTrips::default();
        assert_eq!(rt.data(5, false), None);
        assert_eq!(rt.data(10, true), None);
        assert_eq!(rt.finish(), None);
    }
}
