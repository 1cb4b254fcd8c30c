DROP TABLE IF EXISTS all_types;

DROP TYPE IF EXISTS mood;

CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');

CREATE TABLE all_types (
    id integer PRIMARY KEY,
    c_smallint smallint,
    c_int integer,
    c_bigint bigint,
    c_numeric numeric(10, 2),
    c_numeric_any numeric,
    c_real real,
    c_double double precision,
    c_bool boolean,
    c_text text,
    c_varchar varchar(20),
    c_char char(3),
    c_date date,
    c_time time,
    c_timetz timetz,
    c_timestamp timestamp,
    c_timestamptz timestamptz,
    c_interval interval,
    c_uuid uuid,
    c_json json,
    c_jsonb jsonb,
    c_bytea bytea,
    c_enum mood,
    c_int_array integer[],
    c_text_array text[]
);

INSERT INTO all_types VALUES (
    1, -32768, 2147483647, 9223372036854775807, 12345678.91, 3.14159265358979323846264338,
    1.5, 2.718281828459045, true, 'snapshot row', 'varchar value', 'abc',
    '2024-02-29', '13:45:56.123456', '13:45:56.123456+02', '2024-02-29 13:45:56.123456',
    '2024-02-29 13:45:56.123456+02', '1 year 2 mons 3 days 04:05:06.789',
    'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": 1, "b": [true, null]}',
    '{"k": "v", "n": 1.5}', '\xdeadbeef00', 'happy', '{1,2,NULL,4}',
    '{"x","y z",NULL}');

-- connectors registered here (snapshot of row 1);

INSERT INTO all_types VALUES (
    2, 1, -1, -9223372036854775808, -0.01, -123456789012345678901234567890.123456789,
    -0.0, 1e308, false, 'inserted row', '', 'xy', '0001-01-01', '00:00:00',
    '23:59:59.999999-11', '1970-01-01 00:00:00', '2262-04-11 23:47:16.854775+00',
    '-3 days -00:00:01', '00000000-0000-0000-0000-000000000000', '[]', '{}', '\x',
    'sad', '{}', '{}');

INSERT INTO all_types (id) VALUES (3);

UPDATE all_types SET c_int = 42, c_text = 'updated row', c_numeric = 99.99, c_enum = 'ok' WHERE id = 2;

INSERT INTO all_types (id, c_int, c_text) VALUES (4, 0, '<10000 random letters and digits>');

UPDATE all_types SET c_int = 1 WHERE id = 4;

DELETE FROM all_types WHERE id = 2;

UPDATE all_types SET id = 30 WHERE id = 3;

TRUNCATE all_types;
