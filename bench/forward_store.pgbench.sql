\set r random(1, 64)
SELECT * FROM didcomm_forward_store(1, (SELECT lookup_hash FROM didcomm_recipientkey WHERE id = :r), 100000, false, gen_random_uuid(), (SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 77)), now(), now() + interval '1 day', false);
