<?php

declare(strict_types=1);

namespace App\Models;

use Illuminate\Database\Eloquent\Model;

final class Note extends Model
{
    protected $fillable = ['user_id', 'text'];

    protected $casts = ['user_id' => 'integer'];
}
