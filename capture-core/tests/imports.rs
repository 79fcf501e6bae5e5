//! An imported page's keep-alive goes at the host wait of the last stream
//! that used it, in whatever order the streams wait (rule 24).

use std::sync::Arc;

use backend_host::{DevicePage, Host};
use capture_core::{Builtin, Client};

const N: u32 = 64;

#[test]
fn the_keep_alive_goes_at_the_last_users_wait_in_either_order() {
    for owner_first in [true, false] {
        let client = Client::<Host>::open().expect("host");
        let (s, a) = (
            client.create_stream().expect("s"),
            client.create_stream().expect("a"),
        );
        let kept = Arc::new(());
        let bytes: Vec<u8> = [1.0f32; N as usize]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let page = DevicePage::import(client.device(), &bytes, kept.clone()).expect("a page");
        let x = client
            .import(s, page)
            .map_err(|rejected| rejected.error)
            .expect("imported");
        let out = client.create_f32(a, &[0.0; N as usize]).expect("out");
        client
            .run_builtin(a, Builtin::Copy, &[&x, &out], N, 0.0)
            .expect("a reads the imported page");
        drop(x);
        let (first, last) = if owner_first { (s, a) } else { (a, s) };
        client.sync(first).expect("first wait");
        client.sync(last).expect("last wait");
        assert_eq!(
            Arc::strong_count(&kept),
            1,
            "held after both streams waited, the owner {}",
            if owner_first { "first" } else { "last" }
        );
        assert_eq!(client.read_f32(&out).expect("out"), vec![1.0; N as usize]);
    }
}
