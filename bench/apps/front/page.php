<?php
// A compressible HTML page of about 20 KB, built per request the same way under Peregrine and
// PHP-FPM: a product table, as a shop's listing page would render it.
declare(strict_types=1);

function front_page(): string
{
    $rows = '';
    for ($i = 1; $i <= 170; $i++) {
        $rows .= sprintf(
            "<tr class=\"%s\"><td>%d</td><td><a href=\"/products/%d\">Product %d</a></td><td>%s</td><td>%.2f EUR</td></tr>\n",
            $i % 2 ? 'odd' : 'even', $i, $i, $i, $i % 3 ? 'in stock' : 'ships in 3 days', 9.99 + $i * 1.25
        );
    }

    return "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Products</title>"
        . "<link rel=\"stylesheet\" href=\"/style.css\"></head>\n<body><h1>Products</h1>\n"
        . "<table><thead><tr><th>#</th><th>name</th><th>availability</th><th>price</th></tr></thead><tbody>\n"
        . $rows . "</tbody></table>\n<footer>Prices include VAT.</footer></body></html>\n";
}
