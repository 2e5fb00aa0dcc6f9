CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, price REAL NOT NULL, stock INTEGER NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id),
                     product_id INTEGER NOT NULL REFERENCES products(id), qty INTEGER NOT NULL, status TEXT NOT NULL);
INSERT INTO customers VALUES (1, 'Ann Lee', 'Bergen'), (2, 'Bo Chen', 'Oslo'), (3, 'Cy Diaz', 'Bergen'), (4, 'Eve Ford', 'Trondheim');
INSERT INTO products VALUES (1, 'Desk Lamp', 24.5, 3), (2, 'Notebook', 4.0, 120), (3, 'Pen Set', 12.0, 0),
                            (4, 'Chair', 89.0, 7), (5, 'Mug', 9.5, 0), (6, 'Stapler', 15.0, 12);
INSERT INTO orders VALUES (1, 1, 1, 1, 'shipped'), (2, 2, 2, 10, 'pending'), (3, 2, 4, 1, 'pending'),
                          (4, 3, 6, 2, 'shipped'), (5, 2, 1, 2, 'shipped'), (6, 4, 3, 5, 'cancelled'),
                          (7, 1, 2, 3, 'pending');
